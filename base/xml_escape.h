// XmlEscape: text made safe to put inside an XML element or attribute. The SVG pictures tinyddp draws
// (the DDP timeline, the metrics plot) carry user-given text: labels, titles, file paths.
#ifndef TINYDDP_BASE_XML_ESCAPE_H_
#define TINYDDP_BASE_XML_ESCAPE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace tinyddp {

/// `text` with &, <, >, " and ' escaped for XML.
std::string XmlEscape(absl::string_view text);

}  // namespace tinyddp

#endif  // TINYDDP_BASE_XML_ESCAPE_H_
