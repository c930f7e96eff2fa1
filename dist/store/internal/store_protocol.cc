// The TCPStore wire protocol: see store_protocol.h for the message layout.
#include "dist/store/internal/store_protocol.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tinyddp::dist::internal {

bool StoreRequest::operator==(const StoreRequest& o) const {
  return op == o.op && key == o.key && keys == o.keys && value == o.value && expected == o.expected &&
         number == o.number;
}

MessageWriter& MessageWriter::U8(uint8_t v) {
  buf_.push_back(v);
  return *this;
}

MessageWriter& MessageWriter::U32(uint32_t v) {
  for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return *this;
}

MessageWriter& MessageWriter::I64(int64_t v) {
  const uint64_t u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<uint8_t>(u >> (8 * i)));
  return *this;
}

MessageWriter& MessageWriter::Raw(const void* data, size_t n) {
  U32(static_cast<uint32_t>(n));
  const uint8_t* p = static_cast<const uint8_t*>(data);
  buf_.insert(buf_.end(), p, p + n);
  return *this;
}

absl::Status MessageReader::Need(size_t n) const {
  if (left() < n) {
    return absl::InvalidArgumentError(absl::StrCat("store message truncated: needed ", n, " more bytes at offset ",
                                                   pos_, " of ", body_.size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint8_t> MessageReader::U8() {
  RETURN_IF_ERROR(Need(1));
  return body_[pos_++];
}

absl::StatusOr<uint32_t> MessageReader::U32() {
  RETURN_IF_ERROR(Need(4));
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(body_[pos_++]) << (8 * i);
  return v;
}

absl::StatusOr<int64_t> MessageReader::I64() {
  RETURN_IF_ERROR(Need(8));
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u |= static_cast<uint64_t>(body_[pos_++]) << (8 * i);
  return static_cast<int64_t>(u);
}

absl::StatusOr<Bytes> MessageReader::Blob() {
  ASSIGN_OR_RETURN(const uint32_t len, U32());
  RETURN_IF_ERROR(Need(len));  // checked against what is left before anything is allocated
  Bytes out(body_.begin() + pos_, body_.begin() + pos_ + len);
  pos_ += len;
  return out;
}

absl::StatusOr<std::string> MessageReader::Str() {
  ASSIGN_OR_RETURN(const Bytes b, Blob());
  return std::string(b.begin(), b.end());
}

Bytes EncodeRequest(const StoreRequest& r) {
  MessageWriter w;
  w.U8(static_cast<uint8_t>(r.op));
  switch (r.op) {
    case StoreOp::kHello:
    case StoreOp::kSet:
      w.Str(r.key).Blob(r.value);
      break;
    case StoreOp::kGet:
    case StoreOp::kAdd:
      w.Str(r.key).I64(r.number);
      break;
    case StoreOp::kCompareSet:
      w.Str(r.key).Blob(r.expected).Blob(r.value);
      break;
    case StoreOp::kWait:
      w.U32(static_cast<uint32_t>(r.keys.size()));
      for (const auto& k : r.keys) w.Str(k);
      w.I64(r.number);
      break;
    case StoreOp::kDelete:
      w.Str(r.key);
      break;
    case StoreOp::kNumKeys:
      break;
    case StoreOp::kProof:
      w.Blob(r.value);
      break;
  }
  return w.Take();
}

absl::StatusOr<StoreRequest> ParseRequest(const Bytes& body) {
  MessageReader in(body);
  StoreRequest r;
  ASSIGN_OR_RETURN(const uint8_t op, in.U8());
  r.op = static_cast<StoreOp>(op);
  // Each case in braces: ASSIGN_OR_RETURN declares variables that later case labels must not jump over.
  switch (r.op) {
    case StoreOp::kHello:
    case StoreOp::kSet: {
      ASSIGN_OR_RETURN(r.key, in.Str());
      ASSIGN_OR_RETURN(r.value, in.Blob());
      break;
    }
    case StoreOp::kGet:
    case StoreOp::kAdd: {
      ASSIGN_OR_RETURN(r.key, in.Str());
      ASSIGN_OR_RETURN(r.number, in.I64());
      break;
    }
    case StoreOp::kCompareSet: {
      ASSIGN_OR_RETURN(r.key, in.Str());
      ASSIGN_OR_RETURN(r.expected, in.Blob());
      ASSIGN_OR_RETURN(r.value, in.Blob());
      break;
    }
    case StoreOp::kWait: {
      ASSIGN_OR_RETURN(const uint32_t count, in.U32());
      // Refused before reserving anything: the count is the peer's claim, not yet backed by bytes.
      if (count > kMaxStoreWaitKeys) {
        return absl::InvalidArgumentError(absl::StrCat("store: Wait on ", count, " keys, over the limit of ",
                                                       kMaxStoreWaitKeys, " (kMaxStoreWaitKeys)"));
      }
      for (uint32_t i = 0; i < count; ++i) {
        ASSIGN_OR_RETURN(std::string k, in.Str());
        r.keys.push_back(std::move(k));
      }
      ASSIGN_OR_RETURN(r.number, in.I64());
      break;
    }
    case StoreOp::kDelete: {
      ASSIGN_OR_RETURN(r.key, in.Str());
      break;
    }
    case StoreOp::kNumKeys:
      break;
    case StoreOp::kProof: {
      ASSIGN_OR_RETURN(r.value, in.Blob());
      break;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("store: unknown request op ", static_cast<int>(op), " (is the client a tinyddp store client?)"));
  }
  if (in.left() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: ", in.left(), " unexpected bytes after the request (op ", static_cast<int>(op), ")"));
  }
  return r;
}

MessageWriter OkResponse() {
  MessageWriter w;
  w.U8(0);
  return w;
}

Bytes ErrorResponse(const absl::Status& status) {
  return MessageWriter().U8(static_cast<uint8_t>(status.code())).Str(std::string(status.message())).Take();
}

absl::Status ReadResponseStatus(MessageReader& reader) {
  ASSIGN_OR_RETURN(const uint8_t code, reader.U8());
  if (code == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string message, reader.Str());
  const bool known = code <= static_cast<uint8_t>(absl::StatusCode::kUnauthenticated);
  return absl::Status(known ? static_cast<absl::StatusCode>(code) : absl::StatusCode::kUnknown, message);
}

}  // namespace tinyddp::dist::internal
