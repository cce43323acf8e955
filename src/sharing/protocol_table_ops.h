// The application tables' ops of the owner's wire protocol, 9 to 15: table reads, read views,
// key reservations; and op 16, the health probe's write check, the latest op (it has to come
// after them). sharing/protocol_ops.h says how an op is written down. Never change an op's
// number or the order of its fields: they are on the wire.

#ifndef IDEM_SHARING_PROTOCOL_TABLE_OPS_H_
#define IDEM_SHARING_PROTOCOL_TABLE_OPS_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/backend.h"
#include "sharing/protocol_answers.h"
#include "sharing/protocol_record_ops.h"
#include "sharing/wire_codec.h"

namespace idem::sharing {

// The longest an owner waits on one Reserve request before it answers "not yet": a waiting
// client holds a server thread no longer than this, then asks again (keeping its place).
inline constexpr std::chrono::milliseconds kMaxReserveWait{20};

// Op 9.
struct GetValueMessage {
  static constexpr uint8_t kOp = 9;
  using Answer = AnswerCodec<TableValue, EncodeTableValue, DecodeTableValue>;
  std::string_view table;
  std::string_view key;

  Result<TableValue> CallOn(engine::Backend& backend, const Holder& /*peer*/) const {
    return backend.GetValue(table, key);
  }
  bool Pipelinable() const { return true; }

  void Write(Writer& w) const {
    w.Bytes(table);
    w.Bytes(key);
  }
  static GetValueMessage Read(Reader& r, bool& /*bad*/) {
    GetValueMessage m;
    m.table = r.Bytes();
    m.key = r.Bytes();
    return m;
  }
};

// Op 10.
struct ScanTableMessage {
  static constexpr uint8_t kOp = 10;
  using Answer = AnswerCodec<engine::TablePage, EncodeTablePage, DecodeTablePage>;
  std::string_view table;
  ScanOptions options;
  uint32_t limit;
  uint64_t view = engine::Backend::kLatest;

  Result<engine::TablePage> CallOn(engine::Backend& backend, const Holder& /*peer*/) const {
    return backend.ScanTable(table, options, std::clamp<uint32_t>(limit, 1, kMaxScanPage), view);
  }

  void Write(Writer& w) const {
    w.Bytes(table);
    w.Bytes(options.prefix);
    w.Bytes(options.start_after);
    w.U32(limit);
    w.U64(view);
  }
  static ScanTableMessage Read(Reader& r, bool& /*bad*/) {
    ScanTableMessage m;
    m.table = r.Bytes();
    m.options.prefix = r.Bytes();
    m.options.start_after = r.Bytes();
    m.limit = r.U32();
    m.view = r.U64();
    return m;
  }
};

// Op 11.
struct ListTablesMessage {
  static constexpr uint8_t kOp = 11;
  using Answer = AnswerCodec<std::vector<std::string>, EncodeTableNames, DecodeTableNames>;

  Result<std::vector<std::string>> CallOn(engine::Backend& backend, const Holder& /*peer*/) const {
    return backend.ListTables();
  }

  void Write(Writer& /*w*/) const {}
  static ListTablesMessage Read(Reader& /*r*/, bool& /*bad*/) { return {}; }
};

// Op 12. Opens a read view (Backend::OpenView), answered with its id (EncodeViewId). The owner
// ends it with the connection it was opened on, if CloseView does not first.
struct OpenViewMessage {
  static constexpr uint8_t kOp = 12;
  using Answer = AnswerCodec<uint64_t, EncodeViewId, DecodeViewId>;

  Result<uint64_t> CallOn(engine::Backend& backend, const Holder& /*peer*/) const {
    return backend.OpenView();
  }

  void Write(Writer& /*w*/) const {}
  static OpenViewMessage Read(Reader& /*r*/, bool& /*bad*/) { return {}; }
};

// Op 13.
struct CloseViewMessage {
  static constexpr uint8_t kOp = 13;
  using Answer = NoAnswer;
  uint64_t view = 0;

  Status CallOn(engine::Backend& backend, const Holder& /*peer*/) const {
    return backend.CloseView(view);
  }

  void Write(Writer& w) const { w.U64(view); }
  static CloseViewMessage Read(Reader& r, bool& /*bad*/) { return CloseViewMessage{r.U64()}; }
};

// Op 14. Reserves table keys for a claim (Backend::Reserve), answered with EncodeGranted once
// granted or after min(call.wait, kMaxReserveWait). The owner also ends the reservation with the
// connection it was asked on: a client that dies holds no key after that.
struct ReserveMessage {
  static constexpr uint8_t kOp = 14;
  using Answer = AnswerCodec<bool, EncodeGranted, DecodeGranted>;
  engine::ReserveCall call;

  // The owner waits no longer than kMaxReserveWait, whatever the client asked.
  Result<bool> CallOn(engine::Backend& backend, const Holder& /*peer*/) const {
    engine::ReserveCall bounded = call;
    bounded.wait = std::min(bounded.wait, kMaxReserveWait);
    return backend.Reserve(bounded);
  }

  void Write(Writer& w) const {
    w.Bytes(call.claim_key);
    w.U64(call.token);
    w.Millis(call.hold);
    w.Millis(call.wait);
    w.U32(static_cast<uint32_t>(call.keys.size()));
    for (const auto& [table, key] : call.keys) {
      w.Bytes(table);
      w.Bytes(key);
    }
  }
  static ReserveMessage Read(Reader& r, bool& bad) {
    ReserveMessage m;
    m.call.claim_key = r.Bytes();
    m.call.token = r.U64();
    m.call.hold = r.Millis();
    m.call.wait = r.Millis();
    const uint32_t count = r.U32();
    for (uint32_t i = 0; i < count && !r.failed(); ++i) {
      const std::string_view table = r.Bytes();
      m.call.keys.emplace_back(table, r.Bytes());
    }
    if (m.call.hold.count() <= 0 || m.call.wait.count() < 0) bad = true;
    return m;
  }
};

// Op 15.
struct UnreserveMessage {
  static constexpr uint8_t kOp = 15;
  using Answer = NoAnswer;
  std::string_view claim_key;
  uint64_t token = 0;

  Status CallOn(engine::Backend& backend, const Holder& /*peer*/) const {
    return backend.Unreserve(claim_key, token);
  }

  void Write(Writer& w) const {
    w.Bytes(claim_key);
    w.U64(token);
  }
  static UnreserveMessage Read(Reader& r, bool& /*bad*/) {
    UnreserveMessage m;
    m.claim_key = r.Bytes();
    m.token = r.U64();
    return m;
  }
};

// Op 16 (protocol version 12). Whether the owner would take a claim now (Store::Health): its
// answer is OK, or the error a claim would get. Writes nothing.
struct WritableMessage {
  static constexpr uint8_t kOp = 16;
  using Answer = NoAnswer;

  Status CallOn(engine::Backend& backend, const Holder& /*peer*/) const {
    return backend.Writable();
  }

  void Write(Writer& /*w*/) const {}
  static WritableMessage Read(Reader& /*r*/, bool& /*bad*/) { return {}; }
};

// Op 17 (protocol version 13). The owner's Backend::GetStats (Store::GetStats): its counts of the
// records, kept as it writes, and its engine's health.
struct StatsMessage {
  static constexpr uint8_t kOp = 17;
  using Answer = AnswerCodec<engine::Backend::Stats, EncodeStats, DecodeStats>;

  Result<engine::Backend::Stats> CallOn(engine::Backend& backend, const Holder& /*peer*/) const {
    return backend.GetStats();
  }

  void Write(Writer& /*w*/) const {}
  static StatsMessage Read(Reader& /*r*/, bool& /*bad*/) { return {}; }
};

}  // namespace idem::sharing

#endif  // IDEM_SHARING_PROTOCOL_TABLE_OPS_H_
