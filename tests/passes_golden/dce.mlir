// pipeline: dce
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = hlo.exponential %x : (tensor<4xf32>) -> tensor<4xf32>
  %b = hlo.negate %a : (tensor<4xf32>) -> tensor<4xf32>
  %c = hlo.add %b, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %d = hlo.log %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %d : tensor<4xf32>
}
