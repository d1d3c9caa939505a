"""What the StableHLO importer and exporter share: dimension-number structs, enum attributes, channel
types, and the discardable attributes the exporter writes for what StableHLO cannot say.

One table per fact, read by both :mod:`interop.stablehlo.importer` and :mod:`interop.stablehlo.exporter`.
"""

from __future__ import annotations

from xdsl.dialects.builtin import TupleType
from xdsl.ir import Attribute

STRUCT_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "dot": (("lhs_batching_dimensions", "array"), ("rhs_batching_dimensions", "array"),
            ("lhs_contracting_dimensions", "array"), ("rhs_contracting_dimensions", "array")),
    "gather": (("offset_dims", "array"), ("collapsed_slice_dims", "array"), ("operand_batching_dims", "array"),
               ("start_indices_batching_dims", "array"), ("start_index_map", "array"), ("index_vector_dim", "int")),
    "scatter": (("update_window_dims", "array"), ("inserted_window_dims", "array"), ("input_batching_dims", "array"),
                ("scatter_indices_batching_dims", "array"), ("scatter_dims_to_operand_dims", "array"),
                ("index_vector_dim", "int")),
    "conv": (("input_batch_dimension", "int"), ("input_feature_dimension", "int"),
             ("input_spatial_dimensions", "array"), ("kernel_input_feature_dimension", "int"),
             ("kernel_output_feature_dimension", "int"), ("kernel_spatial_dimensions", "array"),
             ("output_batch_dimension", "int"), ("output_feature_dimension", "int"),
             ("output_spatial_dimensions", "array")),
}
"""StableHLO dimension-number structs (``#stablehlo.<name><...>``) -> their fields, in
StableHLO order. The importer turns each field into an op property of the same name."""

STRUCT_ATTRIBUTE_OF_OP: dict[str, tuple[str, str]] = {
    "stablehlo.dot_general": ("dot_dimension_numbers", "dot"),
    "stablehlo.gather": ("dimension_numbers", "gather"),
    "stablehlo.dynamic_gather": ("dimension_numbers", "gather"),
    "stablehlo.scatter": ("scatter_dimension_numbers", "scatter"),
    "stablehlo.convolution": ("dimension_numbers", "conv"),
    "stablehlo.dynamic_conv": ("dimension_numbers", "conv"),
}
"""StableHLO op -> (name of its dimension-numbers attribute, struct kind)."""

ENUM_ATTRIBUTES: dict[str, str] = {
    "comparison_direction": "comparison_direction",
    "compare_type": "comparison_type",
    "precision_config": "precision",
    "rng_algorithm": "rng_algorithm",
    "rng_distribution": "rng_distribution",
    "fft_type": "fft_type",
    "transpose_a": "transpose",
}
"""Attribute name -> StableHLO enum mnemonic (``#stablehlo<comparison_direction EQ>``);
the hlo dialect stores the enum value as a string (an array of strings for precision_config)."""

CHANNEL_TYPES = {0: "CHANNEL_TYPE_INVALID", 1: "DEVICE_TO_DEVICE", 2: "DEVICE_TO_HOST", 3: "HOST_TO_DEVICE"}
"""StableHLO ``#stablehlo.channel_handle`` type numbers -> hlo ``channel_type`` names."""

CHANNEL_TYPE_NUMBERS: dict[str, int] = {name: number for number, name in CHANNEL_TYPES.items()}
"""hlo ``channel_type`` names -> StableHLO ``#stablehlo.channel_handle`` type numbers."""

QUANTIZATION = "hlo.quantization"
"""Discardable attribute of an op with quantized results or a function with quantized
arguments (from quantized text): ``["quantize" | "dequantize" | "op" | "func", <quantized
type of each result (argument) or "">]``, the types spelled without their ``!quant.``
prefix (``uniform<i8:f32, 0.5:-3>``)."""

QUANTIZED = "hlo.quantized"
"""Unit attribute of a module parsed from quantized text (its ops may carry :data:`QUANTIZATION`)."""

RESULT_LAYOUTS = "hlo.result_layouts"
REGION_ARG_LAYOUTS = "hlo.region_arg_layouts"
BRANCH_OPERANDS = "hlo.branch_operands"
BRANCH_ARGUMENT = "hlo.branch_argument"
ORIGINAL_OP = "hlo.original_op"
IMPLICIT_BROADCAST = "hlo.implicit_broadcast"
BROADCAST_DIMENSIONS = "hlo.broadcast_dimensions"
TUPLE_STATE = "hlo.tuple_state"
STATE_PART = "hlo.tuple_state_part"
STATE_ARG = "hlo.tuple_state_arg"
STATE_RESULT = "hlo.tuple_state_result"
STATE_RETURN = "hlo.tuple_state_return"
"""Discardable attributes written by :mod:`interop.stablehlo.exporter` for what StableHLO cannot say."""


def leaf_types(t: Attribute) -> list[Attribute]:
    """The array (and token) types of a possibly nested tuple type, in order."""
    if isinstance(t, TupleType):
        return [x for e in t.types for x in leaf_types(e)]
    return [t]
