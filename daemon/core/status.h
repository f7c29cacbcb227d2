/* The status every fallible function of the daemon returns. */
#ifndef RD_STATUS_H
#define RD_STATUS_H

#include "ringd.h"

/* ringd's result codes (client/include/ringd.h), inside the daemon too, so that a failure keeps
 * its code from where it happens to the client's Complete: RINGD_OK (0) is success, anything
 * else says what kind of failure, and the detail ("connect 10.0.0.3:7070: Connection refused")
 * goes into an err buffer the caller passes, or to the log where nobody asked. The other shapes
 * are for what is not a failure: constructors return NULL (with err), predicates 0 or 1, and
 * functions that cannot fail return void. */
typedef ringd_result_t rd_status;

#endif
