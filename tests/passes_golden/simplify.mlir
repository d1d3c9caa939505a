// pipeline: simplify,dce
func.func @main(%x: tensor<2x3xf32>, %i: tensor<2x3xi32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xi32>, tensor<3x2xf32>, tensor<2x3xf32>) {
  %mz = hlo.constant <-0.0 : tensor<f32>> : tensor<f32>
  %pz = hlo.constant <0.0 : tensor<f32>> : tensor<f32>
  %one = hlo.constant <1.0 : tensor<f32>> : tensor<f32>
  %izero = hlo.constant <0 : tensor<i32>> : tensor<i32>
  %a = hlo.add %x, %mz : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %b = hlo.add %x, %pz : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %c = hlo.multiply %a, %one : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %d = hlo.add %i, %izero : (tensor<2x3xi32>, tensor<i32>) -> tensor<2x3xi32>
  %t1 = hlo.transpose %x {permutation = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %t2 = hlo.transpose %t1 {permutation = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  %r1 = hlo.reshape %x : (tensor<2x3xf32>) -> tensor<6xf32>
  %r2 = hlo.reshape %r1 : (tensor<6xf32>) -> tensor<3x2xf32>
  %s = hlo.slice %t2 {start_indices = array<i64: 0, 0>, limit_indices = array<i64: 2, 3>, strides = array<i64: 1, 1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %bc = hlo.broadcast_in_dim %s {broadcast_dimensions = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %c, %b, %d, %r2, %bc : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xi32>, tensor<3x2xf32>, tensor<2x3xf32>
}
