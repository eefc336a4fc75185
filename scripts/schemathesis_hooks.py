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
422s.
"""

import hashlib
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
