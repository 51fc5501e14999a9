// Numbers as Python writes them, for lines printed as Python dicts (the
// Trainer's logs, the NLP example's metrics): users of transformers and
// Accelerate read (and parse) these lines, so they must be what Python
// would have printed. LibTorch-free.
#pragma once

#include <string>

namespace accelerate {

// repr(value) of a Python float: the shortest digits that read back to
// `value`, fixed between 1e-4 and 1e16 ("2.0", "0.0001"), else scientific
// ("1e-05", "1.5e+16"); "nan", "inf", "-inf".
std::string python_float_repr(double value);

// f"{value:.{precision}g}" in Python: "8.325", "0.0005", "1e-05", "nan".
std::string python_general_format(double value, int precision);

// Python's round(value, digits): the double nearest to `value` correctly
// rounded to `digits` decimals (ties to even on the exact binary value).
double python_round(double value, int digits);

}  // namespace accelerate
