/* Quantities with units as people type them ("64K", "1MiB"): one parser for the daemon's options
 * and the bench tools, built as a library of its own (rdunits) so that a tool takes it without
 * the daemon's core. */
#ifndef RD_UNITS_H
#define RD_UNITS_H

#include <stdint.h>

#include "status.h"

/* Parses a byte count: digits, optionally followed by K, M or G (powers of 1024, either case)
 * and then B or iB ("123", "64K", "1MiB", "2GB"). No sign, blank or fraction; a value that does
 * not fit 64 bits is refused. Writes *out only on success. Returns RINGD_OK, or
 * RINGD_E_INVALID. Pure: any thread. */
rd_status rd_units_parse_size(const char *s, uint64_t *out);

#endif
