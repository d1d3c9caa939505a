// pipeline: cse
func.func @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %a = hlo.add %x, %y : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %b = hlo.add %x, %y : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %c = hlo.add %y, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %k1 = hlo.constant <[1.0, 2.0, 3.0, 4.0] : tensor<4xf32>> : tensor<4xf32>
  %k2 = hlo.constant <[1.0, 2.0, 3.0, 4.0] : tensor<4xf32>> : tensor<4xf32>
  %d = hlo.multiply %a, %k1 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %e = hlo.multiply %b, %k2 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %f = hlo.subtract %d, %e : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %g = hlo.subtract %f, %c : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %g : tensor<4xf32>
}
