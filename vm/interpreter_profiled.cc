// The interpreter loop with profiling: Impl::ExecuteProfiled (see interpreter.cc).
#define DYNVM_INTERPRETER_PROFILED 1
#include "vm/interpreter.cc"  // NOLINT(build/include): the loop's one definition, compiled again
