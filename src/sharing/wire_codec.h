// The wire protocol's own encoding of values (docs/format.md, "The socket protocol"): integers
// little-endian, bytes length-prefixed, durations in milliseconds, times in microseconds, and
// records and counters field by field.
//
// It is independent of the on-disk record format (storage/rocksdb/record_codec.h) on purpose: the
// two change for different reasons and are versioned apart, the disk's by the record format
// version, the wire's by kProtocolVersion (sharing/protocol.h). A change here is a change of the
// protocol: update docs/format.md and bump kProtocolVersion.

#ifndef IDEM_SHARING_WIRE_CODEC_H_
#define IDEM_SHARING_WIRE_CODEC_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "idem/record.h"
#include "idem/store.h"

namespace idem::sharing {

// Appends wire fields to a buffer.
class Writer {
 public:
  void U8(uint8_t value) { out_ += static_cast<char>(value); }
  void U32(uint32_t value);
  void U64(uint64_t value);
  void I64(int64_t value) { U64(static_cast<uint64_t>(value)); }
  void Bool(bool value) { U8(value ? 1 : 0); }
  void Bytes(std::string_view bytes);  // u32 length, then the bytes
  void Millis(std::chrono::milliseconds value) { I64(value.count()); }
  // Signed microseconds since the Unix epoch; finer digits are dropped (records hold none).
  void Time(std::chrono::system_clock::time_point value);
  void RecordFields(const Record& record);
  void CounterFields(const Counters& counters);

  std::string& buffer() { return out_; }

 private:
  // One record field by its C++ type (RecordFields folds over util::kRecordFields).
  void Field(std::string_view bytes);
  void Field(State state);
  void Field(bool value);
  void Field(uint32_t value);
  void Field(uint64_t value);
  void Field(std::chrono::system_clock::time_point value);

  std::string out_;
};

// Reads wire fields from a buffer. A read past the end, or a field out of its range (a bool
// above 1, a state the library does not know, a time a time_point cannot hold, a counter sent
// twice), sets failed() and returns zero values; callers check failed() once at the end.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  uint8_t U8();
  uint32_t U32();
  uint64_t U64();
  int64_t I64() { return static_cast<int64_t>(U64()); }
  bool Bool();
  std::string_view Bytes();
  std::chrono::milliseconds Millis() { return std::chrono::milliseconds(I64()); }
  std::chrono::system_clock::time_point Time();
  Record RecordFields();
  Counters CounterFields();

  bool failed() const { return failed_; }
  // True when everything was read and nothing is left over.
  bool done() const { return !failed_ && in_.empty(); }
  std::size_t remaining() const { return in_.size(); }

 private:
  bool Take(std::size_t size, std::string_view& out);
  // One record field by its C++ type, as Writer writes it.
  void Field(std::string& bytes);
  void Field(State& state);
  void Field(bool& value);
  void Field(uint32_t& value);
  void Field(uint64_t& value);
  void Field(std::chrono::system_clock::time_point& value);

  std::string_view in_;
  bool failed_ = false;
};

// Reads an enum stored as u8, setting `bad` when it is above `last`.
template <class Enum>
Enum EnumField(Reader& reader, Enum last, bool& bad) {
  const uint8_t value = reader.U8();
  if (value > static_cast<uint8_t>(last)) bad = true;
  return static_cast<Enum>(value);
}

}  // namespace idem::sharing

#endif  // IDEM_SHARING_WIRE_CODEC_H_
