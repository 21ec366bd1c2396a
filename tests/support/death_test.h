// EXPECT_DEATH where death tests can run. Under the aarch64 emulator (qemu-user), a dying
// child's stderr does not reach the parent, so the cross build defines
// MOERT_SKIP_DEATH_TESTS and the rest of such a test is reported skipped (docs/environment.md).
#pragma once

#include <gtest/gtest.h>

#if defined(MOERT_SKIP_DEATH_TESTS)
#define MOERT_EXPECT_DEATH(statement, regex) GTEST_SKIP() << "death tests do not run under the emulator"
#else
#define MOERT_EXPECT_DEATH(statement, regex) EXPECT_DEATH(statement, regex)
#endif
