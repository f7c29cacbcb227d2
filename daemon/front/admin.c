/* The admin requests' table: see admin.h. */
#include "admin.h"

#include "drain.h"
#include "prometheus.h"
#include "status_request.h"
#include "timeline_request.h"

const rd_admin_handler rd_admin_handlers[] = {
    {RINGD__MSG__BODY_STATUS_REQUEST, rd_status_request},
    {RINGD__MSG__BODY_DRAIN_REQUEST, rd_drain_request},
    {RINGD__MSG__BODY_METRICS_REQUEST, rd_prom_request},
    {RINGD__MSG__BODY_TIMELINE_REQUEST, rd_tlreq_request},
};

const size_t rd_admin_nhandlers = sizeof(rd_admin_handlers) / sizeof(rd_admin_handlers[0]);

void rd_admin_forget(rd_front *f, struct rd_session *s)
{
    rd_drain_forget(f, s);
    rd_tlreq_forget(f, s);
}
