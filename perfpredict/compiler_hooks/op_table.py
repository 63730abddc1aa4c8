"""Which canonical op each torch-level or aten-level name is.

Dynamo graphs call torch functions and tensor methods (``linear``, ``view``, ``scaled_dot_product_attention``);
AOT graphs call aten overloads (``addmm``, ``convolution``, ``native_layer_norm``). Both are reduced to one bare
name (see :func:`bare_name`) and looked up here, so the FX and AOT frontends share one table. In-place and dunder
spellings (``add_``, ``__add__``, ``iadd``) reduce to the plain name.
"""

from __future__ import annotations

from perfpredict import ops

_MATMUL = {"linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "mv", "einsum", "dot",
           "_scaled_mm", "tensordot", "bilinear", "_grouped_mm"}
_CONV = {"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "convolution",
         "_convolution", "convolution_backward", "cudnn_convolution", "mkldnn_convolution"}
_ATTENTION = {"scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
              "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
              "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_attention_math",
              "_flash_attention_forward", "_efficient_attention_forward", "multi_head_attention_forward"}
_ATTENTION_BACKWARD = {"_scaled_dot_product_flash_attention_backward",
                       "_scaled_dot_product_efficient_attention_backward",
                       "_scaled_dot_product_cudnn_attention_backward",
                       "_scaled_dot_product_flash_attention_for_cpu_backward",
                       "_flash_attention_backward", "_efficient_attention_backward"}
_NORM = {"layer_norm", "native_layer_norm", "native_layer_norm_backward", "batch_norm", "native_batch_norm",
         "_native_batch_norm_legit", "_native_batch_norm_legit_functional", "_native_batch_norm_legit_no_training",
         "native_batch_norm_backward", "group_norm", "native_group_norm", "native_group_norm_backward",
         "instance_norm", "rms_norm", "_fused_rms_norm", "_fused_rms_norm_backward", "normalize",
         "local_response_norm", "_batch_norm_with_update", "batch_norm_backward", "cudnn_batch_norm"}
_SOFTMAX = {"softmax", "log_softmax", "_safe_softmax", "_softmax", "_log_softmax", "_softmax_backward_data",
            "_log_softmax_backward_data", "softmin"}
_REDUCTION = {"sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "prod", "var", "std", "var_mean",
              "norm", "logsumexp", "cumsum", "cumprod", "all", "any", "count_nonzero", "topk", "sort",
              "linalg_vector_norm", "nansum", "median", "mode", "aminmax"}
_EMBEDDING = {"embedding", "embedding_dense_backward", "embedding_bag", "_embedding_bag"}
_POOLING = {"max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
            "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
            "adaptive_max_pool2d", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "max_pool2d_with_indices",
            "max_pool3d_with_indices", "max_pool2d_with_indices_backward", "avg_pool2d_backward",
            "_adaptive_avg_pool2d_backward", "adaptive_max_pool2d_with_indices", "lp_pool2d", "max_unpool2d",
            "interpolate", "upsample_nearest2d", "upsample_bilinear2d", "_upsample_bilinear2d_aa",
            "upsample_nearest1d", "upsample_linear1d", "grid_sample", "fold", "im2col", "col2im"}
_VIEW = {"view", "reshape", "_reshape_alias", "_unsafe_view", "flatten", "unflatten", "squeeze", "unsqueeze",
         "transpose", "permute", "t", "expand", "expand_as", "view_as", "reshape_as", "getitem", "getattr",
         "split", "split_with_sizes", "chunk", "unbind", "narrow", "select", "slice", "as_strided", "detach",
         "alias", "movedim", "swapaxes", "swapdims", "mT", "T", "real", "imag", "view_as_real", "view_as_complex",
         "unsafe_split", "tensor_split", "diagonal", "numpy_T", "dim", "size", "stride", "numel", "requires_grad_",
         "contiguous_noop", "identity",
         "_assert_tensor_metadata", "sym_size", "sym_numel", "sym_stride", "_assert_async",
         "unfold", "broadcast_to", "dropout_eval"}
_COPY = {"cat", "concat", "concatenate", "stack", "hstack", "vstack", "contiguous", "clone", "copy", "copy_",
         "_to_copy", "to", "float", "half", "bfloat16", "double", "int", "long", "bool", "type", "pad",
         "constant_pad_nd", "reflection_pad2d", "replication_pad2d", "gather", "scatter", "scatter_add",
         "index_select", "index", "index_put", "index_add", "masked_fill", "masked_scatter", "masked_select",
         "roll", "flip", "repeat", "repeat_interleave", "tile", "tril", "triu", "where_copy", "narrow_copy",
         "slice_scatter", "select_scatter", "diagonal_scatter", "as_strided_scatter", "new_empty_strided",
         "embedding_renorm", "cpu", "cuda", "_unsafe_index", "take_along_dim", "nonzero", "unique",
         "select_backward", "slice_backward", "index_put_", "masked_fill_", "zero", "fill", "fill_",
         "resize_", "set_", "sort_values", "bucketize", "searchsorted", "one_hot", "channel_shuffle",
         "pixel_shuffle", "pixel_unshuffle", "type_as", "lift_fresh_copy", "_unsafe_index_put", "alias_copy"}
_CREATION = {"zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint", "randperm", "linspace",
             "logspace", "eye", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like",
             "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "tensor", "scalar_tensor",
             "empty_strided", "bernoulli", "native_dropout_mask", "_to_dense", "empty_permuted", "as_tensor"}
_LOSS = {"cross_entropy", "nll_loss", "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward",
         "mse_loss", "mse_loss_backward", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
         "binary_cross_entropy_with_logits", "kl_div", "cosine_embedding_loss", "ctc_loss", "margin_ranking_loss"}
_OPTIMIZER = {"_fused_adamw", "_fused_adam", "_fused_sgd", "_foreach_add", "_foreach_mul", "_foreach_addcmul",
              "_foreach_addcdiv", "_foreach_lerp", "_foreach_sqrt", "_foreach_div", "_foreach_sub"}

_ELEMENTWISE_ALIASES = {
    "relu": "relu", "relu6": "relu", "leaky_relu": "relu", "hardtanh": "clamp", "threshold": "relu",
    "threshold_backward": "relu", "elu": "exp", "selu": "exp", "celu": "exp", "prelu": "relu", "rrelu": "relu",
    "gelu": "gelu", "gelu_backward": "gelu", "silu": "silu", "silu_backward": "silu", "mish": "silu",
    "sigmoid": "sigmoid", "sigmoid_backward": "sigmoid", "logsigmoid": "sigmoid", "tanh": "tanh",
    "tanh_backward": "tanh", "softplus": "softplus", "hardswish": "hardswish", "hardsigmoid": "hardswish",
    "hardswish_backward": "hardswish", "hardsigmoid_backward": "hardswish", "glu": "sigmoid",
    "exp": "exp", "exp2": "exp", "expm1": "exp", "log": "log", "log2": "log", "log10": "log", "log1p": "log",
    "sqrt": "sqrt", "rsqrt": "rsqrt", "pow": "pow", "square": "mul", "reciprocal": "div", "erf": "erf",
    "erfinv": "erf", "sin": "exp", "cos": "exp", "tan": "exp", "atan": "exp", "atan2": "exp", "sign": "abs",
    "abs": "abs", "neg": "neg", "add": "add", "sub": "sub", "rsub": "sub", "mul": "mul", "div": "div",
    "truediv": "div", "floordiv": "div", "floor_divide": "div", "mod": "div", "remainder": "div",
    "fmod": "div", "true_divide": "div", "addcmul": "mul", "addcdiv": "div", "lerp": "mul", "clamp": "clamp",
    "clamp_min": "clamp", "clamp_max": "clamp", "clip": "clamp", "maximum": "maximum", "minimum": "minimum",
    "fmax": "maximum", "fmin": "minimum", "where": "where", "eq": "where", "ne": "where", "lt": "where",
    "le": "where", "gt": "where", "ge": "where", "logical_and": "where", "logical_or": "where",
    "logical_not": "where", "logical_xor": "where", "and": "where", "or": "where", "xor": "where",
    "invert": "where", "bitwise_and": "where", "bitwise_or": "where", "bitwise_not": "where",
    "isnan": "where", "isinf": "where", "isfinite": "where", "nan_to_num": "where", "floor": "abs",
    "ceil": "abs", "round": "abs", "trunc": "abs", "frac": "abs", "sgn": "abs", "dropout": "dropout",
    "native_dropout": "dropout", "native_dropout_backward": "dropout", "dropout1d": "dropout",
    "dropout2d": "dropout", "feature_dropout": "dropout", "alpha_dropout": "dropout", "matmul_bias": "add",
    "pos": "neg", "mul_scalar": "mul", "softshrink": "relu", "hardshrink": "relu", "tanhshrink": "tanh",
    "logit": "log", "xlogy": "log", "sinh": "exp", "cosh": "exp", "asinh": "exp", "acosh": "exp",
    "digamma": "exp", "lgamma": "exp", "polar": "exp", "angle": "exp", "copysign": "abs", "heaviside": "where",
    "sub_": "sub", "diff": "sub", "lshift": "mul", "rshift": "mul", "le_": "where", "scaled_dot_product_bias": "add",
}

_TABLE: dict[str, str] = {}
for _names, _op in ((_MATMUL, ops.MATMUL), (_CONV, ops.CONV), (_ATTENTION, ops.ATTENTION),
                    (_ATTENTION_BACKWARD, ops.ATTENTION), (_NORM, ops.NORM), (_SOFTMAX, ops.SOFTMAX),
                    (_REDUCTION, ops.REDUCTION), (_EMBEDDING, ops.EMBEDDING), (_POOLING, ops.POOLING),
                    (_VIEW, ops.VIEW), (_COPY, ops.COPY), (_CREATION, ops.CREATION), (_LOSS, ops.LOSS),
                    (_OPTIMIZER, ops.OPTIMIZER), (set(_ELEMENTWISE_ALIASES), ops.ELEMENTWISE)):
    for _n in _names:
        _TABLE.setdefault(_n, _op)


def bare_name(target: object) -> str:
    """The plain op name of an FX target: an aten overload, a torch function, an operator or a method name."""
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:
        name = getattr(packet, "__name__", str(packet))
    elif isinstance(target, str):
        name = target
    else:
        name = getattr(target, "__name__", None) or str(target)
    name = name.split(".")[-1]
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2]
        if name.startswith(("r", "i")) and name[1:] in _TABLE:  # __radd__, __iadd__
            name = name[1:]
    elif name.startswith("i") and name[1:] in _ELEMENTWISE_ALIASES and name not in _TABLE:  # operator.iadd
        name = name[1:]
    if name.endswith("_") and name[:-1] in _TABLE:  # in-place: add_, relu_
        name = name[:-1]
    return name


def classify(name: str) -> str:
    """The canonical op kind for a bare name; ``ops.UNKNOWN`` when there is no cost model for it."""
    return _TABLE.get(name, ops.UNKNOWN)


def elementwise_kind(name: str) -> str:
    """The per-element cost class of an elementwise op (a key of ops.ELEMENTWISE_FLOPS_PER_ELEMENT)."""
    return _ELEMENTWISE_ALIASES.get(name, "add")


def is_attention_backward(name: str) -> bool:
    return name in _ATTENTION_BACKWARD


# nn.Module classes that appear as call_module nodes when dynamo does not inline built-in modules.
MODULE_FUNCTIONS = {
    "Linear": "linear", "LazyLinear": "linear", "Bilinear": "bilinear", "Conv1d": "conv1d", "Conv2d": "conv2d",
    "Conv3d": "conv3d", "ConvTranspose1d": "conv_transpose1d", "ConvTranspose2d": "conv_transpose2d",
    "ConvTranspose3d": "conv_transpose3d", "LayerNorm": "layer_norm", "BatchNorm1d": "batch_norm",
    "BatchNorm2d": "batch_norm", "BatchNorm3d": "batch_norm", "GroupNorm": "group_norm", "RMSNorm": "rms_norm",
    "InstanceNorm2d": "instance_norm", "Embedding": "embedding", "ReLU": "relu", "ReLU6": "relu6",
    "GELU": "gelu", "SiLU": "silu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Hardswish": "hardswish",
    "Hardsigmoid": "hardsigmoid", "LeakyReLU": "leaky_relu", "Mish": "mish", "ELU": "elu", "Softmax": "softmax",
    "LogSoftmax": "log_softmax", "Dropout": "dropout", "Dropout2d": "dropout2d", "Identity": "identity",
    "Flatten": "flatten", "Unflatten": "unflatten", "MaxPool1d": "max_pool1d", "MaxPool2d": "max_pool2d",
    "MaxPool3d": "max_pool3d", "AvgPool1d": "avg_pool1d", "AvgPool2d": "avg_pool2d", "AvgPool3d": "avg_pool3d",
    "AdaptiveAvgPool1d": "adaptive_avg_pool1d", "AdaptiveAvgPool2d": "adaptive_avg_pool2d",
    "AdaptiveMaxPool2d": "adaptive_max_pool2d", "Upsample": "interpolate", "PixelShuffle": "pixel_shuffle",
    "MultiheadAttention": "multi_head_attention_forward", "CrossEntropyLoss": "cross_entropy",
    "MSELoss": "mse_loss", "ZeroPad2d": "pad", "ConstantPad2d": "pad",
}
