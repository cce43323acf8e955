#include "storage/postgres/pg_begin_shape.h"

namespace idem::storage {
namespace {

// The shape after `current` once the share is `share`.
PgBeginShape Next(PgBeginShape current, double share) {
  if (current == PgBeginShape::kReadFirst && share >= PgBeginShapeChooser::kReadFirstUntil) {
    return current;
  }
  if (current == PgBeginShape::kInsertFirst && share <= PgBeginShapeChooser::kInsertFirstUntil) {
    return current;
  }
  if (share >= PgBeginShapeChooser::kReadFirstFrom) return PgBeginShape::kReadFirst;
  if (share <= PgBeginShapeChooser::kInsertFirstFrom) return PgBeginShape::kInsertFirst;
  return PgBeginShape::kReadOrInsert;
}

}  // namespace

std::string_view PgBeginShapeName(PgBeginShape shape) {
  switch (shape) {
    case PgBeginShape::kReadOrInsert:
      return "read or insert";
    case PgBeginShape::kReadFirst:
      return "read first";
    case PgBeginShape::kInsertFirst:
      return "insert first";
  }
  return "unknown";
}

void PgBeginShapeChooser::Saw(bool found) {
  uint32_t share = found_share_.load(std::memory_order_relaxed);
  uint32_t next = 0;
  do {
    next = share - (share >> kWeightShift) + (found ? kOne >> kWeightShift : 0);
  } while (!found_share_.compare_exchange_weak(share, next, std::memory_order_relaxed));
  PgBeginShape current = Shape();
  const PgBeginShape wanted = Next(current, static_cast<double>(next) / kOne);
  // Another Begin may have switched it meanwhile: its choice, on a share as recent, stands.
  if (wanted != current) shape_.compare_exchange_strong(current, wanted, std::memory_order_relaxed);
}

double PgBeginShapeChooser::FoundShare() const {
  return static_cast<double>(found_share_.load(std::memory_order_relaxed)) / kOne;
}

}  // namespace idem::storage
