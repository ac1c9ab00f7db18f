/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Force-included before every file of the module (see Kbuild).
 *
 * libccp's ccp_priv.h defines the opcodes MAX and MIN as plain numbers;
 * kernels >= 6.7 define MAX()/MIN() in <linux/minmax.h>.  Pull minmax.h in
 * first and drop the kernel's versions (nothing in this module uses them),
 * so that the include guard keeps them from coming back and libccp's
 * definitions apply without redefinition warnings.
 */
#ifndef CCP_COMPAT_H
#define CCP_COMPAT_H
#include <linux/kernel.h>
#include <linux/minmax.h>
#undef MAX
#undef MIN
#endif
