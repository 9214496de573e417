// Compiled against the installed include directory alone (tests/install_test.sh checks that
// no flatbuffers or generated schema header is reachable from here).
#include "dynvm/vm/executable.h"
#include "dynvm/vm/profiler.h"
#include "dynvm/vm/virtual_machine.h"

int ConsumerPublicHeadersCompile() { return sizeof(dynvm::RunOptions) > 0 ? 1 : 0; }
