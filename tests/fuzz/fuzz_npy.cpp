// libFuzzer target: the .npy reader. Any bytes give an Array or tpuw::Error, never a crash, a
// hang or an allocation beyond the input's size; an accepted array survives serialize + parse.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "tpuw/error.h"
#include "tpuw/runtime/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tpuw;
  npy::Array a;
  try {
    a = npy::parse(std::span<const uint8_t>(data, size), "fuzz.npy");
  } catch (const Error&) {
    return 0;
  }
  const npy::Array b = npy::parse(npy::serialize(a), "round trip");
  if (b.dtype != a.dtype || b.shape != a.shape || b.data != a.data) std::abort();
  return 0;
}
