# Cross build for aarch64 Linux (Grace nodes of GH200/GB200 clusters) with Debian's
# g++-aarch64-linux-gnu and the arm64 multiarch libraries (scripts/build-aarch64.sh installs
# them; docs/environment.md). Tests run under qemu-user through CMAKE_CROSSCOMPILING_EMULATOR.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Headers and CMake package files of the arm64 multiarch packages live under /usr; the
# libraries under /usr/lib/aarch64-linux-gnu (found through CMAKE_LIBRARY_ARCHITECTURE).
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/aarch64-linux-gnu)
# pkg-config (PCRE2 and utf8proc of the tokenizer) must see the arm64 .pc files only, never the
# host's: otherwise the host's x86-64 libraries end up on the aarch64 link line.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
