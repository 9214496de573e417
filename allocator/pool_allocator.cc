// Placeholder: the pooled allocator is being written.
#include "allocator/pool_allocator.h"
