// pipeline: assign-layouts{target=tpu},tile-layouts,cse,dce
func.func @main(%x: tensor<3x130xf32>, %y: tensor<3x130xf32>) -> (tensor<3x130xf32>, tensor<130xf32>) {
  %a = hlo.add %x, %y : (tensor<3x130xf32>, tensor<3x130xf32>) -> tensor<3x130xf32>
  %m = hlo.multiply %a, %a : (tensor<3x130xf32>, tensor<3x130xf32>) -> tensor<3x130xf32>
  %e = hlo.exponential %m : (tensor<3x130xf32>) -> tensor<3x130xf32>
  %z = hlo.constant <0.0 : tensor<f32>> : tensor<f32>
  %r = hlo.reduce %e, %z {dimensions = array<i64: 0>} : (tensor<3x130xf32>, tensor<f32>) -> tensor<130xf32> {
  ^bb0(%p: tensor<f32>, %q: tensor<f32>):
    %s = hlo.add %p, %q : (tensor<f32>, tensor<f32>) -> tensor<f32>
    hlo.return %s : tensor<f32>
  }
  func.return %e, %r : tensor<3x130xf32>, tensor<130xf32>
}
