/* libringd's ABI conveniences: ringd_version and the header agree. Calls that need no daemon run
 * in the test process; collectives go through a real ringd with forked clients. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "ringd.h"

TestSuite(api, .timeout = 120);

Test(api, version_names_the_header_s_major_and_minor)
{
    const char *v = ringd_version();
    int major = -1, minor = -1, patch = -1, end = 0;
    cr_assert_not_null(v);
    cr_assert_eq(sscanf(v, "%d.%d.%d%n", &major, &minor, &patch, &end), 3,
                 "ringd_version() is '%s', not MAJOR.MINOR.PATCH", v);
    cr_assert_eq(v[end], '\0', "ringd_version() '%s' has more after MAJOR.MINOR.PATCH", v);
    cr_assert(major == RINGD_VERSION_MAJOR && minor == RINGD_VERSION_MINOR,
              "ringd_version() is %s; ringd.h says %d.%d", v, RINGD_VERSION_MAJOR,
              RINGD_VERSION_MINOR);
}
