// "did you mean": the closest of the names a user could have meant (see decodebench/error.h).
#include <algorithm>
#include <string>
#include <vector>

#include "decodebench/error.h"

namespace db {
namespace {

// Edit distance (insertions, deletions, substitutions, and swaps of neighbours, which is
// how most typos happen: "--modle").
size_t distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

}  // namespace

std::string did_you_mean(const std::string& word, const std::vector<std::string>& names) {
  if (word.empty() || word.size() > 200) return "";
  const std::string* best = nullptr;
  size_t best_d = 0;
  for (const std::string& n : names) {
    const size_t d = distance(word, n);
    if (!best || d < best_d) best = &n, best_d = d;
  }
  // Close enough to be a typo of it: a third of the word's letters at most, at least one.
  if (!best || best_d == 0 || best_d > std::max<size_t>(1, word.size() / 3)) return "";
  return " (did you mean " + *best + "?)";
}

}  // namespace db
