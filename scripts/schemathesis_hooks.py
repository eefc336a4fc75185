"""schemathesis hooks for ./scripts/schemathesis.

PUT /api/v1/registrations/{token} ties its path to its body: the token must
be an APNs token (64 hex) when `platform` is `ios` and an FCM token when it
is `android`, and `environment` applies to iOS only. OpenAPI cannot relate a
path parameter to a body field, so the schema states each on its own (the
token as "either format"), and a request valid field by field may still
break the rule and get a 422. In the positive cases only (they assert
acceptance), this hook makes such a request keep the rule: the token is
replaced by one of the body's platform derived from it, and `environment`
is dropped for Android. Negative cases are left as generated. The
coordinator's own tests (coordinator/tests/api/validation.rs) check those
422s. The same goes for a notification's `send_at` (below).
"""

import datetime
import hashlib
import json
import re

import schemathesis

APNS_TOKEN = re.compile(r"[0-9A-Fa-f]{64}")
FCM_TOKEN = re.compile(r"[A-Za-z0-9_:.-]{100,4096}")


@schemathesis.hook("map_case").apply_to(method="PUT", path="/api/v1/registrations/{token}")
def token_fits_platform(context, case):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or not isinstance(case.body, dict):
        return case
    parameters = case.path_parameters or {}
    token = parameters.get("token")
    if not isinstance(token, str):
        return case
    digest = hashlib.sha256(token.encode()).hexdigest()
    platform = case.body.get("platform")
    if platform == "ios" and not APNS_TOKEN.fullmatch(token):
        parameters["token"] = digest
    elif platform == "android":
        if not FCM_TOKEN.fullmatch(token):
            parameters["token"] = "fcm:" + digest * 2
        case.body.pop("environment", None)
    case.path_parameters = parameters
    return case


# A `send_at` must lie in the next 30 days: a rule about the present, which a
# schema cannot state (it says "date-time" and the 30 days in words). In the
# positive cases only, a `send_at` is moved into that window just before the
# request is sent (an hour ahead and up to about a week more, derived from
# the generated value so a run stays repeatable), and a replacement's body
# `id` is made the path's (the rule ties the two, as above). This runs as
# `before_call`, the one hook every phase goes through (explicit examples
# and the stateful phase do not pass through `map_case`). Negative cases are
# left as generated; coordinator/tests/api/scheduled.rs checks those 422s.
SCHEDULED = {("POST", "/api/v1/notifications"), ("PUT", "/api/v1/notifications/{id}")}

# The providers' payload limits (FCM 4000 bytes, reached before APNs' 4096)
# apply to title, body, link, image_url and data together: each field has
# its own maximum in the schema, but their sum cannot be stated there. In
# the positive cases, data entries and then the body are trimmed until the
# FCM payload, computed as clarion_proto::Notification::fcm_payload_bytes
# does, fits with a margin. coordinator/tests/api/validation.rs and the
# proto tests check the 422 for a payload that does not fit.
FCM_BUDGET = 3900


def fcm_payload_bytes(body):
    notification = {}
    if isinstance(body.get("title"), str):
        notification["title"] = body["title"]
    notification["body"] = body.get("body")
    data = dict(body.get("data") or {})
    for key in ("link", "image_url"):
        if isinstance(body.get(key), str):
            data[key] = body[key]
    if isinstance(body.get("image_url"), str):
        notification["image"] = body["image_url"]
    text = json.dumps({"notification": notification, "data": data}, separators=(",", ":"), ensure_ascii=False)
    return len(text.encode("utf-8", "surrogatepass"))


def fit_fcm_limit(body):
    if not isinstance(body.get("body"), str) or not isinstance(body.get("data") or {}, dict):
        return
    while fcm_payload_bytes(body) > FCM_BUDGET and body.get("data"):
        body["data"].pop(next(iter(body["data"])))
    while fcm_payload_bytes(body) > FCM_BUDGET and len(body["body"]) > 1:
        body["body"] = body["body"][: len(body["body"]) // 2]
        if not body["body"].strip():
            body["body"] = "x"
    for optional in ("title", "link", "image_url"):
        if fcm_payload_bytes(body) > FCM_BUDGET:
            body.pop(optional, None)


@schemathesis.hook
def before_call(context, case, kwargs):
    operation = case.operation
    if (operation.method.upper(), operation.path) not in SCHEDULED or not isinstance(case.body, dict):
        return
    meta = case.meta
    if meta is not None and not meta.generation.mode.is_positive:
        return
    fit_fcm_limit(case.body)
    send_at = case.body.get("send_at")
    if send_at is not None:
        offset = int(hashlib.sha256(str(send_at).encode()).hexdigest(), 16) % (7 * 24 * 3600)
        at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1, seconds=offset)
        case.body["send_at"] = at.isoformat()
    if operation.method.upper() == "PUT" and "id" in case.body:
        parameters = case.path_parameters or {}
        if "id" in parameters:
            case.body["id"] = parameters["id"]
