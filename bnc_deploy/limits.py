"""Numeric limits of the arithmetic an exported file computes in, one name each.

An exporter that promises exact scores checks the model against these before it writes a graph
(and refuses, or picks another lowering, when a model would cross one); a limit lives here so that
every exporter checks the same bound. Plain integers, no imports.
"""

#: float32 has a 24-bit significand: every integer of magnitude below 2**24 is exact, and so is a
#: sum of such integers in any order while every partial sum stays below it (2**24 + 1 is the first
#: integer float32 cannot hold). The exact lowerings add integer codes (BN code sums in steps of the
#: quantization step, DNN accumulators) and compute row indices in float32, so each must stay below.
FLOAT32_EXACT_LIMIT = 2**24
#: Largest int32 value: the int8 TFLite kernels accumulate in int32 (a sign layer's bias included),
#: so an accumulator bound above it would wrap.
INT32_LIMIT = 2**31 - 1
