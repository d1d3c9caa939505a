// pipeline: canonicalize-broadcasts
func.func @main(%v: tensor<4xf32>, %m: tensor<1x2xf32>, %a: tensor<4x3x1xf32>, %s: tensor<f32>, %p: tensor<i1>) -> (tensor<4x2xf32>, tensor<4x3x2xi1>, tensor<4x3x1xf32>, tensor<4x3x1xf32>) {
  %r1 = hlo.add %v, %m {broadcast_dimensions = array<i64: 0>} : (tensor<4xf32>, tensor<1x2xf32>) -> tensor<4x2xf32>
  %r2 = hlo.compare %m, %a {comparison_direction = "LT", compare_type = "FLOAT", broadcast_dimensions = array<i64: 1, 2>} : (tensor<1x2xf32>, tensor<4x3x1xf32>) -> tensor<4x3x2xi1>
  %r3 = hlo.select %p, %a, %a : (tensor<i1>, tensor<4x3x1xf32>, tensor<4x3x1xf32>) -> tensor<4x3x1xf32>
  %r4 = hlo.clamp %s, %a, %s : (tensor<f32>, tensor<4x3x1xf32>, tensor<f32>) -> tensor<4x3x1xf32>
  func.return %r1, %r2, %r3, %r4 : tensor<4x2xf32>, tensor<4x3x2xi1>, tensor<4x3x1xf32>, tensor<4x3x1xf32>
}
