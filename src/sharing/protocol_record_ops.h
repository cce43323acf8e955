// The records' ops of the owner's wire protocol, 1 to 8 (sharing/protocol_ops.h says how an op
// is written down). Never change an op's number or the order of its fields: they are on the wire.

#ifndef IDEM_SHARING_PROTOCOL_RECORD_OPS_H_
#define IDEM_SHARING_PROTOCOL_RECORD_OPS_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "engine/backend.h"
#include "engine/durability.h"
#include "sharing/protocol_answers.h"
#include "sharing/wire_codec.h"

namespace idem::sharing {

// Scan pages asked for over the socket are capped: a client cannot make the owner build an
// arbitrarily large response.
inline constexpr uint32_t kMaxScanPage = 4096;

// A table write group on the wire (docs/format.md, `write :=` and `required :=`): the writes,
// then the keys required at a version.
void WriteWriteSet(Writer& w, const WriteSet& writes);
void ReadWriteSet(Reader& r, bool& bad, WriteSet& writes);

// Op 1.
struct BeginMessage {
  static constexpr uint8_t kOp = 1;
  using Answer = AnswerCodec<Claim, EncodeClaim, DecodeClaim>;
  engine::BeginCall call;

  // The owner names the holder from the connection's peer credentials, not from the client.
  Result<Claim> CallOn(engine::Backend& backend, const Holder& peer) const {
    return backend.Begin(call, peer);
  }
  bool Pipelinable() const { return !engine::SyncedBeforeReturning(call.durability); }
  bool JoinsWriteGroup() const { return !engine::SyncedBeforeReturning(call.durability); }

  void Write(Writer& w) const {
    w.Bytes(call.key);
    w.Bytes(call.type);
    w.Bytes(call.fingerprint);
    w.Millis(call.lease);
    w.Millis(call.retention);
    w.U64(call.request_id);
    w.U8(static_cast<uint8_t>(call.durability));
  }
  static BeginMessage Read(Reader& r, bool& bad) {
    engine::BeginCall c;
    c.key = r.Bytes();
    c.type = r.Bytes();
    c.fingerprint = r.Bytes();
    c.lease = r.Millis();
    c.retention = r.Millis();
    c.request_id = r.U64();
    c.durability = EnumField(r, Durability::kPeriodic, bad);
    if (c.lease.count() <= 0 || c.retention.count() <= 0) bad = true;
    return BeginMessage{c};
  }
};

// Op 2. call.writes is null in a decoded message: the writes (and requirements) are `writes`
// (the server points the call at them; a pointer would not survive the message being moved).
// An encoded message sends the call's writes when it has them, else its own.
struct TransitionMessage {
  static constexpr uint8_t kOp = 2;
  static constexpr bool kKeptWhenAbandoned = true;
  using Answer = NoAnswer;
  engine::TransitionCall call;
  WriteSet writes;

  // The call, pointed at the writes the message carries.
  Status CallOn(engine::Backend& backend, const Holder& /*peer*/) const {
    engine::TransitionCall pointed = call;
    pointed.writes = &Writes();
    return backend.Transition(pointed);
  }
  bool Pipelinable() const { return !engine::SyncedBeforeReturning(call.durability); }
  // Only without table writes or required keys (WriteSet::empty).
  bool JoinsWriteGroup() const {
    return !engine::SyncedBeforeReturning(call.durability) && Writes().empty();
  }
  // The writes it carries: the call's when it points at some (a client's message), else its own
  // (a decoded one's).
  const WriteSet& Writes() const { return call.writes != nullptr ? *call.writes : writes; }

  void Write(Writer& w) const {
    w.U8(static_cast<uint8_t>(call.request.kind));
    w.Bytes(call.key);
    w.U64(call.request.token);
    w.Bytes(call.request.payload);
    w.U8(static_cast<uint8_t>(call.request.failure));
    w.Millis(call.request.lease);
    w.U8(static_cast<uint8_t>(call.durability));
    WriteWriteSet(w, Writes());
  }
  static TransitionMessage Read(Reader& r, bool& bad) {
    engine::TransitionCall c;
    c.request.kind = EnumField(r, engine::TransitionKind::kSaveCheckpoint, bad);
    c.key = r.Bytes();
    c.request.token = r.U64();
    c.request.payload = r.Bytes();
    c.request.failure = EnumField(r, Failure::kTerminal, bad);
    c.request.lease = r.Millis();
    c.durability = EnumField(r, Durability::kPeriodic, bad);
    if (c.request.kind == engine::TransitionKind::kExtend && c.request.lease.count() <= 0) {
      bad = true;
    }
    TransitionMessage message{c, {}};
    ReadWriteSet(r, bad, message.writes);
    return message;
  }
};

// Op 3.
struct GetMessage {
  static constexpr uint8_t kOp = 3;
  using Answer = AnswerCodec<std::optional<Record>, EncodeOptionalRecord, DecodeOptionalRecord>;
  std::string_view key;

  Result<std::optional<Record>> CallOn(engine::Backend& backend, const Holder& /*peer*/) const {
    return backend.Get(key);
  }
  bool Pipelinable() const { return true; }

  void Write(Writer& w) const { w.Bytes(key); }
  static GetMessage Read(Reader& r, bool& /*bad*/) { return GetMessage{r.Bytes()}; }
};

// Op 4.
struct ForgetMessage {
  static constexpr uint8_t kOp = 4;
  static constexpr bool kKeptWhenAbandoned = true;
  using Answer = NoAnswer;
  std::string_view key;
  Durability durability;
  // Version 12: only the record read with this token and updated time (Store::ForgetIfUnchanged).
  std::optional<engine::AsRead> as_read;

  Status CallOn(engine::Backend& backend, const Holder& /*peer*/) const {
    return backend.Forget(key, durability, as_read ? &*as_read : nullptr);
  }

  void Write(Writer& w) const {
    w.Bytes(key);
    w.U8(static_cast<uint8_t>(durability));
    w.Bool(as_read.has_value());
    w.U64(as_read ? as_read->token : 0);
    w.Time(as_read ? as_read->updated : std::chrono::system_clock::time_point{});
  }
  static ForgetMessage Read(Reader& r, bool& bad) {
    ForgetMessage m;
    m.key = r.Bytes();
    m.durability = EnumField(r, Durability::kPeriodic, bad);
    const uint8_t conditional = r.U8();
    const engine::AsRead as_read{.token = r.U64(), .updated = r.Time()};
    // Without a condition its fields are zeros: any other bytes are malformed (one request,
    // one encoding).
    if (conditional > 1 ||
        (conditional == 0 && (as_read.token != 0 || as_read.updated != engine::TimePoint{}))) {
      bad = true;
    }
    if (conditional == 1) m.as_read = as_read;
    return m;
  }
};

// Op 5.
struct ScanMessage {
  static constexpr uint8_t kOp = 5;
  using Answer = AnswerCodec<engine::ScanPage, EncodeScanPage, DecodeScanPage>;
  ScanOptions options;
  uint32_t limit;
  uint64_t view = engine::Backend::kLatest;

  Result<engine::ScanPage> CallOn(engine::Backend& backend, const Holder& /*peer*/) const {
    return backend.Scan(options, std::clamp<uint32_t>(limit, 1, kMaxScanPage), view);
  }

  void Write(Writer& w) const {
    w.Bytes(options.prefix);
    w.Bytes(options.start_after);
    w.U32(limit);
    w.U64(view);
  }
  static ScanMessage Read(Reader& r, bool& /*bad*/) {
    ScanMessage m;
    m.options.prefix = r.Bytes();
    m.options.start_after = r.Bytes();
    m.limit = r.U32();
    m.view = r.U64();
    return m;
  }
};

// Op 6. Starts the purge job `ticket` (chosen at random by the client, one per Store::Purge
// call) or asks how the one already started is going. The owner answers when the job is done or
// after `wait`, whichever comes first, with a PurgeProgress: every request is bounded however
// long the purge takes. The callbacks of options do not travel: the answers carry what they
// report.
struct PurgeMessage {
  static constexpr uint8_t kOp = 6;
  // Run as a job by the owner (OwnerServer::RunOp), not by a CallOn.
  using Answer = AnswerCodec<PurgeProgress, EncodePurgeProgress, DecodePurgeProgress>;
  PurgeOptions options;
  uint64_t ticket = 0;
  std::chrono::milliseconds wait{0};
  // The client wants the total (it has a progress_total): the job counts it before purging.
  // Read when the job starts; counting costs a walk over the due index entries, so a client
  // that does not show the total does not ask.
  bool count_total = false;

  void Write(Writer& w) const {
    w.U64(ticket);
    w.Bool(options.dry_run);
    w.Bool(options.compact);
    w.Millis(wait);
    w.Bool(count_total);
  }
  static PurgeMessage Read(Reader& r, bool& bad) {
    PurgeMessage m;
    m.ticket = r.U64();
    const uint8_t dry_run = r.U8();
    const uint8_t compact = r.U8();
    m.wait = r.Millis();
    const uint8_t count_total = r.U8();
    if (dry_run > 1 || compact > 1 || m.wait.count() < 0 || count_total > 1) bad = true;
    m.options.dry_run = dry_run == 1;
    m.options.compact = compact == 1;
    m.count_total = count_total == 1;
    return m;
  }
};

// Op 7.
struct CountersMessage {
  static constexpr uint8_t kOp = 7;
  using Answer = AnswerCodec<OwnerCounters, EncodeCounters, DecodeCounters>;

  Result<OwnerCounters> CallOn(engine::Backend& backend, const Holder& /*peer*/) const {
    return backend.GetOwnerCounters();
  }

  void Write(Writer& /*w*/) const {}
  static CountersMessage Read(Reader& /*r*/, bool& /*bad*/) { return {}; }
};

// Op 8. Starts the backup job `ticket` (one per Store::Backup call) into `destination` (an
// absolute path, on the owner's file systems) or asks how it is going; answered as a purge poll
// is, with a PurgeProgress whose count is 0, without a total.
struct BackupMessage {
  static constexpr uint8_t kOp = 8;
  // Run as a job by the owner (OwnerServer::RunOp), not by a CallOn.
  using Answer = AnswerCodec<PurgeProgress, EncodePurgeProgress, DecodePurgeProgress>;
  uint64_t ticket = 0;
  std::chrono::milliseconds wait{0};
  std::string_view destination;

  void Write(Writer& w) const {
    w.U64(ticket);
    w.Millis(wait);
    w.Bytes(destination);
  }
  static BackupMessage Read(Reader& r, bool& bad) {
    BackupMessage m;
    m.ticket = r.U64();
    m.wait = r.Millis();
    m.destination = r.Bytes();
    if (m.wait.count() < 0 || m.destination.empty() || m.destination[0] != '/') bad = true;
    return m;
  }
};

}  // namespace idem::sharing

#endif  // IDEM_SHARING_PROTOCOL_RECORD_OPS_H_
