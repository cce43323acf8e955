// One table of a Record's fields, for the encodings that list them all: each field's name in the
// export (JSON Lines), its place on the wire, its PostgreSQL column. An encoding folds over the
// table at compile time (ForEachRecordField), coding each value by its C++ type, so a field is
// added, or its name looked up, in one place. The disk format (storage/rocksdb/record_codec) is
// not in it: it is versioned and written by hand, as docs/format.md describes it byte for byte.
//
// Header-only, in util/: the wire codec (sharing/), PostgreSQL's rows (storage/postgres/) and the
// command (tools/) all see util/, and nothing here runs at run time but the fold's own calls.

#ifndef IDEM_UTIL_RECORD_FIELDS_H_
#define IDEM_UTIL_RECORD_FIELDS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "idem/record.h"

namespace idem::util {

// A field of Record (`Member`), or of its Holder (`Member` = &Record::holder, `Sub` its field).
template <auto Member, auto Sub = nullptr>
struct RecordField {
  std::string_view name;    // in the export ("holder"'s object holds the holder's fields)
  int wire;                 // its place in the wire's record (docs/format.md "record :="), from 0
  std::string_view column;  // its PostgreSQL column (kPgRecordColumns); "": not stored there
  bool exported = true;     // written by `idem export` (timed_out is derived from the lease)
  uint64_t largest = 0;     // an integer's largest value in a store; 0: its type's largest

  static constexpr bool kInHolder = !std::is_same_v<decltype(Sub), std::nullptr_t>;

  static constexpr auto& Of(Record& record) {
    if constexpr (kInHolder) {
      return (record.*Member).*Sub;
    } else {
      return record.*Member;
    }
  }
  static constexpr const auto& Of(const Record& record) {
    if constexpr (kInHolder) {
      return (record.*Member).*Sub;
    } else {
      return record.*Member;
    }
  }
  using Type = std::remove_cvref_t<decltype(Of(std::declval<const Record&>()))>;

  // An integer field's largest value: `largest`, or its type's.
  constexpr uint64_t Largest() const requires std::is_integral_v<Type> &&
      (!std::is_same_v<Type, bool>) {
    return largest != 0 ? largest : std::numeric_limits<Type>::max();
  }
};

// The largest fencing token: PostgreSQL keeps tokens as int8, and the export reads them as such
// (storage::kMaxToken is the same, and checked to be).
inline constexpr uint64_t kLargestToken = std::numeric_limits<int64_t>::max();

// Every field, in the export's order (docs/format.md "Export"), the holder's last. Never change
// a `wire` value or a name: the protocol's goldens and the export's readers pin them.
inline constexpr std::tuple kRecordFields{
    RecordField<&Record::key>{"key", 0, "key"},
    RecordField<&Record::type>{"type", 3, "type"},
    RecordField<&Record::state>{"state", 1, "state"},
    RecordField<&Record::timed_out>{"timed_out", 2, "", /*exported=*/false},
    RecordField<&Record::result>{"result", 5, "result"},
    RecordField<&Record::fingerprint>{"fingerprint", 4, "fingerprint"},
    RecordField<&Record::checkpoint>{"checkpoint", 6, "checkpoint"},
    RecordField<&Record::token>{"token", 7, "token", true, kLargestToken},
    RecordField<&Record::attempts>{"attempts", 8, "attempts"},
    RecordField<&Record::retryable>{"retryable", 9, "retryable"},
    RecordField<&Record::created>{"created", 10, "created"},
    RecordField<&Record::updated>{"updated", 11, "updated"},
    RecordField<&Record::lease_deadline>{"lease_deadline", 12, "lease_deadline"},
    RecordField<&Record::expires>{"expires", 13, "expires"},
    RecordField<&Record::holder, &Holder::pid>{"pid", 14, "holder_pid"},
    RecordField<&Record::holder, &Holder::process_start>{"process_start", 15, "holder_start"},
    RecordField<&Record::holder, &Holder::pid_scope>{"pid_scope", 16, "holder_scope"},
    RecordField<&Record::holder, &Holder::request_id>{"request_id", 17, "holder_request"},
    RecordField<&Record::holder, &Holder::took_over>{"took_over", 18, "holder_took_over"},
};
inline constexpr std::size_t kRecordFieldCount = std::tuple_size_v<decltype(kRecordFields)>;

// A row of the table as a type, so that its field is a constant expression inside a fold.
template <std::size_t I>
struct RecordRow {
  static constexpr std::size_t kIndex = I;
  static constexpr const auto& field = std::get<I>(kRecordFields);
  // The first of the holder's rows: where an encoding that nests the holder opens it.
  static constexpr bool kFirstInHolder =
      field.kInHolder &&
      (I == 0 ||
       !std::remove_cvref_t<decltype(std::get<(I == 0 ? 0 : I - 1)>(kRecordFields))>::kInHolder);
};

// Calls f(RecordRow<Order[0]>{}), f(RecordRow<Order[1]>{}), ... in that order: a fold, with no
// loop at run time.
template <const auto& Order, class F>
constexpr void ForEachRecordField(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) { (f(RecordRow<Order[I]>{}), ...); }
  (std::make_index_sequence<std::size(Order)>());
}

// The row of the field named `name` (the holder's fields by their own names), or
// kRecordFieldCount when none is.
constexpr std::size_t RecordFieldIndex(std::string_view name) {
  std::size_t index = kRecordFieldCount;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((index = index == kRecordFieldCount && RecordRow<I>::field.name == name ? I : index), ...);
  }
  (std::make_index_sequence<kRecordFieldCount>());
  return index;
}

// The table's (the export's) order.
inline constexpr std::array<std::size_t, kRecordFieldCount> kTableOrder = [] {
  std::array<std::size_t, kRecordFieldCount> order{};
  for (std::size_t i = 0; i < kRecordFieldCount; ++i) order[i] = i;
  return order;
}();

namespace record_fields_internal {

// Converts to anything: counts an aggregate's fields (FieldCount).
struct AnyField {
  template <class T>
  constexpr operator T() const;  // never called: only in an unevaluated requires-expression
};

template <class T, class... Fields>
constexpr std::size_t FieldCount(Fields... fields) {
  if constexpr (requires { T{fields..., AnyField{}}; }) {
    return FieldCount<T>(fields..., AnyField{});
  } else {
    return sizeof...(Fields);
  }
}

template <std::size_t... I>
constexpr bool HolderRowsAreLast(std::index_sequence<I...>) {
  // Once a holder row comes, only holder rows follow.
  bool in_holder = false;
  bool ordered = true;
  ((ordered = ordered && (!in_holder || RecordRow<I>::field.kInHolder),
    in_holder = in_holder || RecordRow<I>::field.kInHolder),
   ...);
  return ordered;
}

template <std::size_t... I>
constexpr bool WirePlacesArePermutation(std::index_sequence<I...>) {
  std::array<int, kRecordFieldCount> seen{};
  const bool in_range = ((RecordRow<I>::field.wire >= 0 &&
                          RecordRow<I>::field.wire < static_cast<int>(kRecordFieldCount)) &&
                         ...);
  if (!in_range) return false;
  ((++seen[static_cast<std::size_t>(RecordRow<I>::field.wire)]), ...);
  for (int count : seen) {
    if (count != 1) return false;
  }
  return true;
}

}  // namespace record_fields_internal

// A Record member (or a Holder member) without a row does not compile: Record and Holder must stay
// aggregates, whose members are counted.
static_assert(record_fields_internal::FieldCount<Record>() - 1 +
                      record_fields_internal::FieldCount<Holder>() ==
                  kRecordFieldCount,
              "every field of Record and of its Holder needs a row in kRecordFields");
static_assert(RecordRow<0>::field.name == "key", "the key comes first: messages name it");
static_assert(
    record_fields_internal::HolderRowsAreLast(std::make_index_sequence<kRecordFieldCount>()),
    "the holder's rows are last and together: the export nests them in one object");
static_assert(
    record_fields_internal::WirePlacesArePermutation(std::make_index_sequence<kRecordFieldCount>()),
    "each wire place from 0 to the count is given to one field");

// The wire's order: kWireOrder[place] is the row sent at that place.
inline constexpr std::array<std::size_t, kRecordFieldCount> kWireOrder =
    []<std::size_t... I>(std::index_sequence<I...>) {
  std::array<std::size_t, kRecordFieldCount> order{};
  ((order[static_cast<std::size_t>(RecordRow<I>::field.wire)] = I), ...);
  return order;
}
(std::make_index_sequence<kRecordFieldCount>());

}  // namespace idem::util

#endif  // IDEM_UTIL_RECORD_FIELDS_H_
