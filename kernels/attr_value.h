// Public API. A kernel or IR node attribute value (an ONNX attribute): shared by the compiler's
// IR, the executable builder, the loader and the kernels. It sits beside Tensor rather than in
// common/ because a tensor-valued attribute holds a Tensor (a view of a constant).
#ifndef DYNVM_KERNELS_ATTR_VALUE_H_
#define DYNVM_KERNELS_ATTR_VALUE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace dynvm {

struct AttrValue {
  enum class Type : uint8_t { kInt, kFloat, kString, kInts, kFloats, kStrings, kTensor };
  Type type = Type::kInt;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
  Tensor tensor;  // kTensor: a read-only view (of a constant, when loaded from a file)
};

}  // namespace dynvm

#endif  // DYNVM_KERNELS_ATTR_VALUE_H_
