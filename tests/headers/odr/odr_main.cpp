// Links the two generated translation units (odr_a.cu, odr_b.cu) that both
// include every device header; building this program is the check. Running
// it touches no device.
#include <cstdint>
#include <cstdio>

std::uintptr_t specdec_odr_a();
std::uintptr_t specdec_odr_b();

int main() {
  // The same header entities in both units: the same addresses after linking.
  const bool same = specdec_odr_a() == specdec_odr_b();
  std::printf("two-TU link check: %s\n", same ? "one definition per entity" : "entities differ between units");
  return same ? 0 : 1;
}
