// pipeline: assign-layouts{target=cpu}
func.func @main(%x: tensor<16x256xf32, #hlo.layout<{1,0}>>, %y: tensor<256x16xf32, #hlo.layout<{0,1}>>, %h: tensor<8x3xbf16>) -> (tensor<256x16xf32, #hlo.layout<{1,0}>>, tensor<16xf32, #hlo.layout<{0}>>, tensor<8x3xbf16>) {
  %t = hlo.transpose %x {permutation = array<i64: 1, 0>} : (tensor<16x256xf32, #hlo.layout<{1,0}>>) -> tensor<256x16xf32>
  %s = hlo.add %t, %y : (tensor<256x16xf32>, tensor<256x16xf32, #hlo.layout<{0,1}>>) -> tensor<256x16xf32>
  %e = hlo.exponential %s : (tensor<256x16xf32>) -> tensor<256x16xf32, #hlo.layout<{1,0}>>
  %z = hlo.constant <0.0 : tensor<f32>> : tensor<f32>
  %r = hlo.reduce %e, %z {dimensions = array<i64: 0>} : (tensor<256x16xf32, #hlo.layout<{1,0}>>, tensor<f32>) -> tensor<16xf32, #hlo.layout<{0}>> {
  ^bb0(%p: tensor<f32>, %q: tensor<f32>):
    %sum = hlo.add %p, %q : (tensor<f32>, tensor<f32>) -> tensor<f32>
    hlo.return %sum : tensor<f32>
  }
  %n = hlo.negate %h : (tensor<8x3xbf16>) -> tensor<8x3xbf16>
  func.return %e, %r, %n : tensor<256x16xf32, #hlo.layout<{1,0}>>, tensor<16xf32, #hlo.layout<{0}>>, tensor<8x3xbf16>
}
