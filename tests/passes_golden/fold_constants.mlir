// pipeline: fold-constants,dce
func.func @main(%x: tensor<3xi32>) -> tensor<3xi32> {
  %k = hlo.constant <[1, 2, 3] : tensor<3xi32>> : tensor<3xi32>
  %two = hlo.constant <2 : tensor<i32>> : tensor<i32>
  %io = hlo.iota {iota_dimension = 0 : i64} : tensor<3xi32>
  %a = hlo.multiply %k, %two : (tensor<3xi32>, tensor<i32>) -> tensor<3xi32>
  %b = hlo.add %a, %io : (tensor<3xi32>, tensor<3xi32>) -> tensor<3xi32>
  %c = hlo.add %b, %x : (tensor<3xi32>, tensor<3xi32>) -> tensor<3xi32>
  func.return %c : tensor<3xi32>
}
