// valid_utf8 (core/utf8.h): what a log receives of a sample that is not valid UTF-8.
#include <gtest/gtest.h>

#include "core/utf8.h"

namespace inkstone {
namespace {

TEST(ValidUtf8, EveryByteThatStartsNoSequenceBecomesOneReplacementCharacter) {
  EXPECT_EQ(valid_utf8("plain text\n"), "plain text\n");
  EXPECT_EQ(valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(valid_utf8("a\xff"
                       "b"),
            "a\xef\xbf\xbd"
            "b");
  EXPECT_EQ(valid_utf8("cut \xc3"), "cut \xef\xbf\xbd");                          // a character cut short at the end
  EXPECT_EQ(valid_utf8("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");                  // an overlong '/': both bytes
  EXPECT_EQ(valid_utf8("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // a surrogate
  EXPECT_EQ(valid_utf8(""), "");
}

}  // namespace
}  // namespace inkstone
