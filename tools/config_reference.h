// The configuration reference (docs/config.md) written from the schema and the registries, so that the document
// cannot drift from the code: `inkstone train --print-reference` prints it and a test compares it with the file.
#pragma once
#include <string>

namespace inkstone {

// Markdown: one table per section, one row per key with its type, default, allowed values or range, and meaning;
// the values a registry accepts (objectives, block letters) listed from the registry itself.
std::string config_reference_markdown();

}  // namespace inkstone
