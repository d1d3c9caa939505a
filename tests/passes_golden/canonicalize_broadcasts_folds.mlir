// pipeline: canonicalize-broadcasts,dce
func.func @main(%x: tensor<3xf32>) -> (tensor<2x4x3xf32>, tensor<2x3xf32>, tensor<3xf32>) {
  %k = hlo.constant <2.5 : tensor<f32>> : tensor<f32>
  %b1 = hlo.broadcast_in_dim %x {broadcast_dimensions = array<i64: 1>} : (tensor<3xf32>) -> tensor<4x3xf32>
  %b2 = hlo.broadcast_in_dim %b1 {broadcast_dimensions = array<i64: 1, 2>} : (tensor<4x3xf32>) -> tensor<2x4x3xf32>
  %b3 = hlo.broadcast %k {broadcast_sizes = array<i64: 2, 3>} : (tensor<f32>) -> tensor<2x3xf32>
  %t = hlo.transpose %x {permutation = array<i64: 0>} : (tensor<3xf32>) -> tensor<3xf32>
  func.return %b2, %b3, %t : tensor<2x4x3xf32>, tensor<2x3xf32>, tensor<3xf32>
}
