#include "sharing/wire_codec.h"

#include "util/coding.h"
#include "util/record_fields.h"
#include "util/time.h"

namespace idem::sharing {
namespace {

// A counter's number on the wire is its row in kCounters (idem/counters.h), from 1. Rows are
// never reordered nor removed, so a number is never reused: a reader skips numbers it does not
// know, so a counter added within a protocol version reads as 0 from an older owner and is
// ignored by an older client.
constexpr uint8_t WireNumber(std::size_t row) { return static_cast<uint8_t>(row + 1); }
static_assert(kCounterCount < 32, "counter numbers are 1 to 31 (Reader's `seen` mask)");
// The size of one counter on the wire: u8 id, u64 value.
constexpr std::size_t kCounterSize = 9;

}  // namespace

void Writer::U32(uint32_t value) { util::PutFixed32(out_, value); }
void Writer::U64(uint64_t value) { util::PutFixed64(out_, value); }

void Writer::Bytes(std::string_view bytes) {
  U32(static_cast<uint32_t>(bytes.size()));
  out_.append(bytes);
}

void Writer::Time(std::chrono::system_clock::time_point value) { I64(util::ToMicros(value)); }

void Writer::RecordFields(const Record& record) {
  // Each field in its wire place, coded by its type: a fold, the same calls as written out.
  util::ForEachRecordField<util::kWireOrder>([&](auto row) { Field(row.field.Of(record)); });
}

void Writer::Field(std::string_view bytes) { Bytes(bytes); }
void Writer::Field(State state) { U8(static_cast<uint8_t>(state)); }
void Writer::Field(bool value) { Bool(value); }
void Writer::Field(uint32_t value) { U32(value); }
void Writer::Field(uint64_t value) { U64(value); }
void Writer::Field(std::chrono::system_clock::time_point value) { Time(value); }

void Writer::CounterFields(const Counters& counters) {
  U32(static_cast<uint32_t>(kCounterCount));
  for (std::size_t row = 0; row < kCounterCount; ++row) {
    U8(WireNumber(row));
    U64(counters.*kCounters[row].field);
  }
}

bool Reader::Take(std::size_t size, std::string_view& out) {
  if (failed_ || in_.size() < size) {
    failed_ = true;
    return false;
  }
  out = in_.substr(0, size);
  in_.remove_prefix(size);
  return true;
}

uint8_t Reader::U8() {
  std::string_view bytes;
  return Take(1, bytes) ? static_cast<uint8_t>(bytes[0]) : 0;
}

uint32_t Reader::U32() {
  std::string_view bytes;
  return Take(4, bytes) ? util::GetFixed32(bytes.data()) : 0;
}

uint64_t Reader::U64() {
  std::string_view bytes;
  return Take(8, bytes) ? util::GetFixed64(bytes.data()) : 0;
}

bool Reader::Bool() {
  const uint8_t value = U8();
  if (value > 1) failed_ = true;
  return value == 1;
}

std::string_view Reader::Bytes() {
  const uint32_t size = U32();
  std::string_view bytes;
  Take(size, bytes);
  return bytes;
}

std::chrono::system_clock::time_point Reader::Time() {
  const int64_t micros = I64();
  if (!util::MicrosFitTimePoint(micros)) {
    failed_ = true;
    return {};
  }
  return util::FromMicros(micros);
}

Record Reader::RecordFields() {
  Record record;
  util::ForEachRecordField<util::kWireOrder>([&](auto row) { Field(row.field.Of(record)); });
  if (failed_) return {};
  return record;
}

void Reader::Field(std::string& bytes) { bytes = Bytes(); }
void Reader::Field(State& state) { state = EnumField(*this, State::kFailed, failed_); }
void Reader::Field(bool& value) { value = Bool(); }
void Reader::Field(uint32_t& value) { value = U32(); }
void Reader::Field(uint64_t& value) { value = U64(); }
void Reader::Field(std::chrono::system_clock::time_point& value) { value = Time(); }

Counters Reader::CounterFields() {
  Counters counters;
  const uint32_t count = U32();
  if (failed_ || count > remaining() / kCounterSize) {
    failed_ = true;
    return {};
  }
  uint32_t seen = 0;  // bit i: the counter numbered i was read (numbers 1 to 31 are known)
  for (uint32_t i = 0; i < count && !failed_; ++i) {
    const uint8_t id = U8();
    const uint64_t value = U64();
    for (std::size_t row = 0; row < kCounterCount; ++row) {
      if (WireNumber(row) != id) continue;
      if ((seen & (1u << id)) != 0) failed_ = true;
      seen |= 1u << id;
      counters.*kCounters[row].field = value;
    }
  }
  if (failed_) return {};
  return counters;
}

}  // namespace idem::sharing
