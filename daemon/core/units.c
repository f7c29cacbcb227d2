/* Quantities with units: see units.h. */
#include "units.h"

#include <errno.h>
#include <stdlib.h>

rd_status rd_units_parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (s == NULL || *s < '0' || *s > '9') /* strtoull would take spaces and signs */
        return RINGD_E_INVALID;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s)
        return RINGD_E_INVALID;
    unsigned shift = 0;
    switch (*end) {
    case '\0': break;
    case 'k':
    case 'K':
        shift = 10;
        end++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        end++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        end++;
        break;
    default: return RINGD_E_INVALID;
    }
    if (shift && end[0] == 'i' && end[1] == 'B')
        end += 2;
    else if (shift && end[0] == 'B')
        end++;
    if (*end != '\0' || (shift && v > (UINT64_MAX >> shift)))
        return RINGD_E_INVALID;
    *out = (uint64_t)v << shift;
    return RINGD_OK;
}
