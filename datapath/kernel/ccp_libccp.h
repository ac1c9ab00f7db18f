/* SPDX-License-Identifier: GPL-2.0 */
/*
 * libccp's private header, for this module's own files.  Include it after
 * every kernel header: it defines the opcodes MAX and MIN, which replace
 * the kernel's MAX()/MIN() (kernels >= 6.7) from here on.
 */
#ifndef CCP_LIBCCP_H
#define CCP_LIBCCP_H
#undef MAX
#undef MIN
#include "ccp_priv.h"
#include "serialize.h"
#endif
