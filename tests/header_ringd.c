/* Compiles the public header alone: it must bring everything it uses. */
#include "ringd.h"

size_t rd_header_check(void);
size_t rd_header_check(void)
{
    ringd_options_t o = RINGD_OPTIONS_INIT;
    return o.struct_size;
}
