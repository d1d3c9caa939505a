// pipeline: assign-layouts{target=tpu}
func.func @main(%x: tensor<16x256xf32>, %p: tensor<8x1x300xbf16>, %q: tensor<3x130xi8>, %b: tensor<2x200xi1>, %c: tensor<1x200xf32>, %u: tensor<1000xf32>) -> (tensor<256x16xf32>, tensor<2x8x256xf32>, tensor<8x1x300xbf16>, tensor<3x130xi8>, tensor<2x200xi1>, tensor<1x200xf32>, tensor<1000xf32>) {
  %t = hlo.transpose %x {permutation = array<i64: 1, 0>} : (tensor<16x256xf32>) -> tensor<256x16xf32>
  %e = hlo.exponential %t : (tensor<256x16xf32>) -> tensor<256x16xf32>
  %r = hlo.reshape %x : (tensor<16x256xf32>) -> tensor<2x8x256xf32>
  %n = hlo.negate %p : (tensor<8x1x300xbf16>) -> tensor<8x1x300xbf16>
  %w = hlo.negate %q : (tensor<3x130xi8>) -> tensor<3x130xi8>
  %m = hlo.not %b : (tensor<2x200xi1>) -> tensor<2x200xi1>
  %v = hlo.abs %c : (tensor<1x200xf32>) -> tensor<1x200xf32>
  %s = hlo.sqrt %u : (tensor<1000xf32>) -> tensor<1000xf32>
  func.return %e, %r, %n, %w, %m, %v, %s : tensor<256x16xf32>, tensor<2x8x256xf32>, tensor<8x1x300xbf16>, tensor<3x130xi8>, tensor<2x200xi1>, tensor<1x200xf32>, tensor<1000xf32>
}
