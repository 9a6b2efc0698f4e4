// The printers of a comparison (compare.h): the md table and the json document the compare
// verb prints.
#pragma once

#include <string>

#include "decodebench/compare.h"

namespace db {

// md: a GitHub table of the pairs, a summary line, the unmatched keys of each side, and the
// gate's outcome. json: {threshold, alpha, pairs, unmatched_base, unmatched_new, regressed,
// improved, incomplete, exit_code}.
// Both end with a newline.
std::string format_comparison_md(const Comparison& c);
std::string format_comparison_json(const Comparison& c);

}  // namespace db
