"""schemathesis hooks for ./scripts/schemathesis.

PUT /api/v1/registrations/{token} ties its path to its body: the token must
be an APNs token (64 hex) when `platform` is `ios` and an FCM token when it
is `android`, and `environment` applies to iOS only. OpenAPI cannot relate a
path parameter to a body field, so the schema states each on its own (the
token as "either format"), and a request valid field by field may still
break the rule and get a 422. In the positive cases only (they assert
acceptance), this hook makes such a request keep the rule: the token is
replaced by one of the body's platform derived from it, and `environment`
is dropped for Android; a web registration gets a real subscription and
only a web one keeps one; a `push_to_start` registration is made iOS with
an `attributes_type`, and any other drops `attributes_type`. Negative
cases are left as generated. The coordinator's own tests
(coordinator/tests/api/validation.rs, push_to_start.rs) check those 422s.
The same goes for a notification's `send_at` (below).
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
    if case.body.get("kind") == "push_to_start":
        # Push-to-start tokens are iOS only and name their attributes type.
        case.body["platform"] = "ios"
        if not isinstance(case.body.get("attributes_type"), str):
            case.body["attributes_type"] = "MatchAttributes"
    else:
        case.body.pop("attributes_type", None)
    platform = case.body.get("platform")
    if platform == "ios" and not APNS_TOKEN.fullmatch(token):
        parameters["token"] = digest
    elif platform == "android":
        if not FCM_TOKEN.fullmatch(token):
            parameters["token"] = "fcm:" + digest * 2
        case.body.pop("environment", None)
    elif platform == "web":
        # A web registration carries a browser's subscription (its key must
        # be a point on P-256, which no schema can say): a real one.
        parameters["token"] = "web-" + digest[:40]
        case.body.pop("environment", None)
        case.body["subscription"] = WEB_SUBSCRIPTION
    if platform != "web":
        # Only a web registration may carry a subscription.
        case.body.pop("subscription", None)
    case.path_parameters = parameters
    return case


WEB_SUBSCRIPTION = {
    "endpoint": "https://fcm.googleapis.com/fcm/send/schemathesis",
    "keys": {
        "p256dh": "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
        "auth": "BTBZMqHH6r4Tts7J_aSIgg",
    },
}


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

# The providers' payload limits (FCM 4000 bytes, APNs 4096) apply to every
# field of the message together: each field has
# its own maximum in the schema, but their sum cannot be stated there. In
# the positive cases, data entries and then the body are trimmed until the
# FCM payload, computed as clarion_proto::Notification::fcm_payload_bytes
# does, fits with a margin. coordinator/tests/api/validation.rs and the
# proto tests check the 422 for a payload that does not fit.
FCM_BUDGET = 3900


APNS_BUDGET = 4000


def text(value):
    return value if isinstance(value, str) else None


def json_bytes(value):
    encoded = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return len(encoded.encode("utf-8", "surrogatepass"))


def custom_keys(body):
    data = dict(body.get("data") or {})
    for key in ("link", "image_url"):
        if text(body.get(key)) is not None:
            data[key] = body[key]
    return data


def fcm_payload_bytes(body):
    """As clarion_proto::Notification::fcm_payload_bytes computes it."""
    root = {}
    if body.get("push_type") != "background":
        notification = {"body": body.get("body") or ""}
        if text(body.get("title")) is not None:
            notification["title"] = body["title"]
        if text(body.get("image_url")) is not None:
            notification["image"] = body["image_url"]
        android = {}
        for field, key in (("sound", "sound"), ("category", "click_action"), ("android_channel_id", "channel_id")):
            if text(body.get(field)) is not None:
                android[key] = body[field]
        if body.get("badge") is not None:
            android["notification_count"] = int(body["badge"])
        if body.get("interruption_level") is not None:
            android["notification_priority"] = "PRIORITY_DEFAULT"
        root = {"notification": notification, "android_notification": android}
    root["data"] = custom_keys(body)
    return json_bytes(root)


def apns_payload_bytes(body):
    """Close to clarion_proto::Notification::apns_payload_bytes (a bound)."""
    aps = {"content-available": 1}
    if body.get("push_type") != "background":
        aps = {"alert": {"title": body.get("title") or "", "body": body.get("body") or ""},
               "sound": text(body.get("sound")) or "default", "badge": body.get("badge"),
               "category": body.get("category"), "mutable-content": 1,
               "thread-id": text(body.get("collapse_key")) or "",
               "interruption-level": "time-sensitive", "relevance-score": 0.123456789}
    root = custom_keys(body)
    root["aps"] = aps
    return json_bytes(root)


def fits(body):
    return fcm_payload_bytes(body) <= FCM_BUDGET and apns_payload_bytes(body) <= APNS_BUDGET


def localized(body, text):
    """The body as a device of that language gets it."""
    one = dict(body)
    one["title"] = text.get("title")
    one["body"] = text.get("body")
    return one


# Language tags are compared without regard to case: `fr` and `FR` in one
# notification is a 422 the schema cannot state (propertyNames are checked
# one by one). In the positive cases the second of such a pair is dropped,
# and so is any localization whose text would not fit the payload limits.
def fit_localizations(body):
    texts = body.get("localizations")
    if not isinstance(texts, dict):
        return
    seen = set()
    for tag in list(texts):
        text = texts[tag]
        if tag.lower() in seen or not isinstance(text, dict) or not fits(localized(body, text)):
            texts.pop(tag)
        else:
            seen.add(tag.lower())


def fit_fcm_limit(body):
    if not isinstance(body.get("data") or {}, dict):
        return
    while not fits(body) and body.get("data"):
        body["data"].pop(next(iter(body["data"])))
    while not fits(body) and isinstance(body.get("body"), str) and len(body["body"]) > 1:
        body["body"] = body["body"][: len(body["body"]) // 2]
        if not body["body"].strip():
            body["body"] = "x"
    for optional in ("title", "link", "image_url", "category", "android_channel_id", "sound"):
        if not fits(body) and text(body.get(optional)) is not None:
            body.pop(optional, None)
    fit_localizations(body)


# GET /api/v1/audience takes a comma-separated list of 1 to 20 names. Its
# pattern states their characters and count, not each name's 128-byte
# limit (a name longer counts 0). The stateful phase then feeds the names
# of its answer to the operations whose `topic` parameter does state the
# limit. In the positive cases, each name is cut to 128 bytes, as a client
# following a topic's own rule would send it.
MAX_TOPIC_BYTES = 128


def fit_audience_names(case):
    query = case.query or {}
    names = query.get("topics")
    if not isinstance(names, str):
        return
    fitted = []
    for name in names.split(","):
        while len(name.encode()) > MAX_TOPIC_BYTES or name.endswith("/"):
            name = name[:-1]
        fitted.append(name)
    query["topics"] = ",".join(fitted)
    case.query = query


@schemathesis.hook
def before_call(context, case, kwargs):
    operation = case.operation
    meta = case.meta
    if meta is not None and not meta.generation.mode.is_positive:
        return
    if (operation.method.upper(), operation.path) == ("GET", "/api/v1/audience"):
        fit_audience_names(case)
        return
    if (operation.method.upper(), operation.path) == ("PUT", "/api/v1/registrations/{token}"):
        # Explicit examples do not pass through `map_case`: the same rule.
        token_fits_platform(context, case)
        return
    if (operation.method.upper(), operation.path) not in SCHEDULED or not isinstance(case.body, dict):
        return
    fit_fcm_limit(case.body)
    web = case.body.get("web")
    if isinstance(web, dict) and web.get("declarative") and not case.body.get("link"):
        # The declarative form needs a link to navigate to (422 without).
        case.body["web"] = None
    send_at = case.body.get("send_at")
    if send_at is not None:
        offset = int(hashlib.sha256(str(send_at).encode()).hexdigest(), 16) % (7 * 24 * 3600)
        at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1, seconds=offset)
        case.body["send_at"] = at.isoformat()
    if operation.method.upper() == "PUT" and "id" in case.body:
        parameters = case.path_parameters or {}
        if "id" in parameters:
            case.body["id"] = parameters["id"]


# A Live Activity's start push and its updates are checked as Apple will
# get them: at most 4096 bytes once built, a `dismissal_date` not before
# the `stale_date`, and the start push's text (`name` when there is no
# `alert`, else the alert) as a notification's title and body. A schema
# cannot state these, so in the positive cases only the hooks below keep
# them: objects too large for one push are emptied, texts made plain,
# dates put in order, and whole numbers JSON writes as `5.0` made `5`.
# The coordinator's own tests (load-tests/tests/live_activities.rs) check
# those 422s.

PLAIN = re.compile(r"[\x00-\x1f\x7f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")
I64 = (-(2**63), 2**63 - 1)


def _positive_body(case):
    meta = case.meta
    return meta is not None and meta.generation.mode.is_positive and isinstance(case.body, dict)


def _small(value, limit=600):
    """`value` when it fits one push with room to spare and holds no NUL
    (which PostgreSQL cannot store: a 422 naming the field), else `{}`."""
    text = json.dumps(value)
    return value if len(text) <= limit and "\\u0000" not in text else {}


def _plain(text, fallback):
    text = PLAIN.sub("", text)[:120] if isinstance(text, str) else text
    return text if isinstance(text, str) and text.strip() else fallback


def _whole(value, low, high):
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and not low <= value <= high:
        return None
    return value


@schemathesis.hook("map_case").apply_to(method="POST", path="/api/v1/live-activities")
def start_push_fits(context, case):
    if not _positive_body(case):
        return case
    body = case.body
    for field in ("attributes", "content_state"):
        if isinstance(body.get(field), dict):
            body[field] = _small(body[field])
    body["name"] = _plain(body.get("name"), "England v France")
    if isinstance(body.get("alert"), dict):
        alert = body["alert"]
        alert["title"] = _plain(alert.get("title"), "Kick-off")
        alert["body"] = _plain(alert.get("body"), "England v France has started")
    if "stale_after_seconds" in body:
        body["stale_after_seconds"] = _whole(body["stale_after_seconds"], 1, 28 * 24 * 3600)
    return case


@schemathesis.hook("map_case").apply_to(method="POST", path="/api/v1/live-activities/{id}/updates")
def update_fits(context, case):
    if not _positive_body(case):
        return case
    body = case.body
    if isinstance(body.get("content_state"), dict):
        body["content_state"] = _small(body["content_state"])
    if isinstance(body.get("alert"), dict):
        alert = body["alert"]
        alert["title"] = _plain(alert.get("title"), "Goal")
        alert["body"] = _plain(alert.get("body"), "1-0")
    for field in ("stale_date", "dismissal_date"):
        if field in body:
            body[field] = _whole(body[field], *I64)
    stale, dismissal = body.get("stale_date"), body.get("dismissal_date")
    if isinstance(stale, int) and isinstance(dismissal, int) and dismissal < stale:
        body["dismissal_date"] = stale
    return case
