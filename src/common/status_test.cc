#include "nostall/status.h"

#include <gtest/gtest.h>

namespace nostall {
namespace {

Result<int> Half(int v) {
  if (v % 2) return InvalidArgument(std::to_string(v) + " is odd");
  return v / 2;
}

Result<int> Quarter(int v) {
  NOSTALL_ASSIGN_OR_RETURN(int h, Half(v));
  NOSTALL_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(StatusTest, DataErrorNamesItemAndStage) {
  Status s = DataError("premature end of data").WithItem("train/cat/1.jpg", "decode");
  EXPECT_EQ(s.code(), StatusCode::kDataError);
  EXPECT_EQ(s.ToString(), "DataError: decode: train/cat/1.jpg: premature end of data");
  EXPECT_EQ(s.item(), "train/cat/1.jpg");
  EXPECT_EQ(s.stage(), "decode");
}

TEST(StatusTest, AssignOrReturnPropagatesTheFirstError) {
  EXPECT_EQ(Quarter(12).value(), 3);
  Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "3 is odd");
}

TEST(StatusTest, ErrnoErrorMapsCommonCodes) {
  EXPECT_EQ(ErrnoError("open", ENOENT).code(), StatusCode::kNotFound);
  EXPECT_EQ(ErrnoError("open", EMFILE).code(), StatusCode::kResourceExhausted);
  EXPECT_NE(ErrnoError("open", EACCES).message().find("Permission denied"), std::string::npos);
}

}  // namespace
}  // namespace nostall
