#include "gtest/gtest.h"
#include "kernels/testing.h"
