// JSON numbers read as C++ numbers without undefined behaviour. nlohmann's
// get<T>() converts a number with a plain cast, which is undefined where the
// value lies outside T's range (1e300 as an int, 1e93 as an int64_t, 1e39
// as a float: the fuzz targets found each). Readers of JSON that users or
// downloads write check json_number_fits<T> before get<T>.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <utility>

namespace dendrite {

// False for a JSON number T cannot hold: for an integer T, a fraction,
// exponent form or a value outside T's range; for a floating T, a value
// past its largest. True for anything else, including a value that is not a
// number at all, whose get<T>() throws nlohmann's own type error.
template <class T>
bool json_number_fits(const nlohmann::json& v) {
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    if (!v.is_number()) return true;
    if constexpr (std::is_integral_v<T>) {
      return v.is_number_unsigned() ? std::in_range<T>(v.get<uint64_t>())
                                    : v.is_number_integer() && std::in_range<T>(v.get<int64_t>());
    } else {
      const double x = v.get<double>();
      return std::isfinite(x) && std::fabs(x) <= double(std::numeric_limits<T>::max());
    }
  }
  return true;
}

// What json_number_fits<T> asks of a number, for error messages.
template <class T>
std::string json_number_kind() {
  if constexpr (std::is_integral_v<T>)
    return "an integer from " + std::to_string(std::numeric_limits<T>::min()) + " to " +
           std::to_string(std::numeric_limits<T>::max());
  else
    return std::string("a number of magnitude at most ") +
           (sizeof(T) == 4 ? "3.4e38 (a float's)" : "1.8e308 (a double's)");
}

}  // namespace dendrite
