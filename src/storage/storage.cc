// The interface's destructors, out of line: the vtables of ReadView and Storage get one home,
// and the interface layer one source of its own (an object library needs one).

#include "storage/storage.h"

namespace idem::storage {

ReadView::~ReadView() = default;
Storage::~Storage() = default;

}  // namespace idem::storage
