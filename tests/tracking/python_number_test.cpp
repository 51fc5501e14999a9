// Numbers as Python prints them, checked against Python itself: the values
// go to /usr/bin/python3 as hex floats (exact), which prints repr(x) and
// repr(round(x, n)) for the digits the Trainer's logs round to, and
// f"{x:.4g}", the form its console lines show.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "accelerate/tracking/python_number.h"

namespace accelerate {
namespace {

// repr() itself is common/environment_text's python_float_text (its own
// cases in tests/common/settings_test.cpp); these are the log's forms.
TEST(PythonNumber, FormatAndRoundOfTypicalLogValues) {
  EXPECT_EQ(python_float_repr(std::nan("")), "nan");
  EXPECT_EQ(python_float_repr(-INFINITY), "-inf");
  EXPECT_EQ(python_general_format(8.325151443481445, 4), "8.325");
  EXPECT_EQ(python_general_format(4.5e-05, 4), "4.5e-05");
  EXPECT_EQ(python_general_format(-std::nan(""), 4), "nan");
  EXPECT_EQ(python_round(8.325151443481445, 4), 8.3252);
  EXPECT_EQ(python_round(2.675, 2), 2.67);  // 2.675 is just below in binary
}

std::vector<double> sample_values() {
  std::vector<double> values = {
      0.0,  -0.0, 1.0,  0.5,         0.125, 0.00005, 0.00015, 1.00005,   2.675,        1e-4,
      1e-5, 1e16, 1e15, 123456789.0, 1e300, 5e-324,  1.5e-7,  0.1 + 0.2, 10.999607683, 4.9e-05};
  std::mt19937_64 random(20261206);
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-12, 18);
  for (int i = 0; i < 3000; ++i)
    values.push_back(mantissa(random) * std::pow(10.0, exponent(random)));
  // Ties in decimal that are not ties in binary, around the rounding digits.
  for (int i = 0; i < 500; ++i) values.push_back((i + 0.5) / 10000.0 + i);
  return values;
}

TEST(PythonNumber, ReprAndRoundAreWhatPythonPrints) {
  const char* python = "/usr/bin/python3";
  if (::access(python, X_OK) != 0) GTEST_SKIP() << python << " is not installed";
  const std::string folder = ::testing::TempDir();
  const std::string in = folder + "/python_number_in.txt", out = folder + "/python_number_out.txt";
  const std::string script = folder + "/python_number.py";
  std::ofstream(script) << "import sys\n"
                           "with open(sys.argv[1]) as src, open(sys.argv[2], 'w') as dst:\n"
                           "    for line in src:\n"
                           "        x = float.fromhex(line)\n"
                           "        dst.write(' '.join([repr(x)] + [repr(round(x, n)) for n in (2, "
                           "3, 4)] + [f'{x:.4g}']) + '\\n')\n";
  const std::vector<double> values = sample_values();
  {
    std::ofstream file(in);
    char hex[64];
    for (double value : values) {
      std::snprintf(hex, sizeof(hex), "%a", value);
      file << hex << "\n";
    }
  }
  ASSERT_EQ(std::system((std::string(python) + " " + script + " " + in + " " + out).c_str()), 0);
  std::ifstream expected(out);
  std::size_t checked = 0;
  for (double value : values) {
    std::string repr, round2, round3, round4, general;
    ASSERT_TRUE(expected >> repr >> round2 >> round3 >> round4 >> general)
        << "python wrote too few lines";
    EXPECT_EQ(python_general_format(value, 4), general) << repr;
    EXPECT_EQ(python_float_repr(value), repr);
    EXPECT_EQ(python_float_repr(python_round(value, 2)), round2) << repr;
    EXPECT_EQ(python_float_repr(python_round(value, 3)), round3) << repr;
    EXPECT_EQ(python_float_repr(python_round(value, 4)), round4) << repr;
    ++checked;
  }
  EXPECT_EQ(checked, values.size());
}

}  // namespace
}  // namespace accelerate
