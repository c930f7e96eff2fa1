// The TCPStore wire protocol: see store_protocol.h for the message layout.
#include "dist/store/internal/store_protocol.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tinyddp::dist::internal {

MessageWriter& MessageWriter::U8(uint8_t v) {
  buf_.push_back(v);
  return *this;
}

MessageWriter& MessageWriter::I64(int64_t v) {
  const uint64_t u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<uint8_t>(u >> (8 * i)));
  return *this;
}

MessageWriter& MessageWriter::Raw(const void* data, size_t n) {
  const uint32_t len = static_cast<uint32_t>(n);
  for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<uint8_t>(len >> (8 * i)));
  const uint8_t* p = static_cast<const uint8_t*>(data);
  buf_.insert(buf_.end(), p, p + n);
  return *this;
}

absl::Status MessageReader::Need(size_t n) const {
  if (body_.size() - pos_ < n) {
    return absl::DataLossError(absl::StrCat("store message truncated: needed ", n, " more bytes at offset ", pos_,
                                            " of ", body_.size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint8_t> MessageReader::U8() {
  RETURN_IF_ERROR(Need(1));
  return body_[pos_++];
}

absl::StatusOr<int64_t> MessageReader::I64() {
  RETURN_IF_ERROR(Need(8));
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u |= static_cast<uint64_t>(body_[pos_++]) << (8 * i);
  return static_cast<int64_t>(u);
}

absl::StatusOr<Bytes> MessageReader::Blob() {
  absl::Status s = Need(4);
  RETURN_IF_ERROR(s);
  uint32_t len = 0;
  for (int i = 0; i < 4; ++i) len |= static_cast<uint32_t>(body_[pos_++]) << (8 * i);
  s = Need(len);
  RETURN_IF_ERROR(s);
  Bytes out(body_.begin() + pos_, body_.begin() + pos_ + len);
  pos_ += len;
  return out;
}

absl::StatusOr<std::string> MessageReader::Str() {
  auto b = Blob();
  RETURN_IF_ERROR(b);
  return std::string(b->begin(), b->end());
}

Bytes ErrorResponse(const absl::Status& status) {
  return MessageWriter().U8(static_cast<uint8_t>(status.code())).Str(std::string(status.message())).Take();
}

absl::Status ReadResponseStatus(MessageReader& reader) {
  auto code = reader.U8();
  RETURN_IF_ERROR(code);
  if (*code == 0) return absl::OkStatus();
  auto message = reader.Str();
  RETURN_IF_ERROR(message);
  return absl::Status(static_cast<absl::StatusCode>(*code), *message);
}

}  // namespace tinyddp::dist::internal
