#include "base/xml_escape.h"

#include "gtest/gtest.h"

namespace tinyddp {
namespace {

TEST(XmlEscape, EscapesTheFiveSpecialCharacters) {
  EXPECT_EQ(XmlEscape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;");
}

TEST(XmlEscape, LeavesOtherTextAloneIncludingUtf8) {
  EXPECT_EQ(XmlEscape("bucket 0 · 1.5 MiB, 数据并行"), "bucket 0 · 1.5 MiB, 数据并行");
  EXPECT_EQ(XmlEscape(""), "");
}

}  // namespace
}  // namespace tinyddp
