#include "common/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace dynvm {
namespace {

TEST(Utf8Test, ValidStrings) {
  EXPECT_EQ(InvalidUtf8Offset(""), -1);
  EXPECT_EQ(InvalidUtf8Offset("plain ascii"), -1);
  EXPECT_EQ(InvalidUtf8Offset("caf\xc3\xa9"), -1);           // é, 2 bytes
  EXPECT_EQ(InvalidUtf8Offset("\xe2\x82\xac"), -1);          // €, 3 bytes
  EXPECT_EQ(InvalidUtf8Offset("\xf0\x9f\x98\x80"), -1);      // U+1F600, 4 bytes
  EXPECT_EQ(InvalidUtf8Offset("\xf4\x8f\xbf\xbf"), -1);      // U+10FFFF
  EXPECT_EQ(InvalidUtf8Offset(std::string("a\0b", 3)), -1);  // NUL is a character
}

TEST(Utf8Test, InvalidStringsGiveTheOffset) {
  EXPECT_EQ(InvalidUtf8Offset("ab\xff"), 2);
  EXPECT_EQ(InvalidUtf8Offset("\x80"), 0);                    // a lone continuation byte
  EXPECT_EQ(InvalidUtf8Offset("a\xc3"), 1);                   // truncated
  EXPECT_EQ(InvalidUtf8Offset("\xc0\xaf"), 0);                // overlong '/'
  EXPECT_EQ(InvalidUtf8Offset("\xe0\x80\xaf"), 0);            // overlong, 3 bytes
  EXPECT_EQ(InvalidUtf8Offset("\xf0\x80\x80\xaf"), 0);        // overlong, 4 bytes
  EXPECT_EQ(InvalidUtf8Offset("x\xed\xa0\x80"), 1);           // a surrogate (U+D800)
  EXPECT_EQ(InvalidUtf8Offset("\xf4\x90\x80\x80"), 0);        // above U+10FFFF
  EXPECT_EQ(InvalidUtf8Offset("\xe2\x82"), 0);                // truncated 3-byte
  EXPECT_EQ(InvalidUtf8Offset("\xe2\x28\xa1"), 0);            // bad continuation
  EXPECT_EQ(InvalidUtf8Offset("ok\xf0\x9f\x98\x80\xf8"), 6);  // 5-byte lead
}

}  // namespace
}  // namespace dynvm
