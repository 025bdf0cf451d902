"""SASL_HANDSHAKE and SASL_AUTHENTICATE: a client names a mechanism, then sends its tokens until
the login completes (``Session.logged_in``) or is refused (SASL_AUTHENTICATION_FAILED, and the
connection closes after the answer). With ``connections.max.reauth.ms``, a login lasts that long
(or until its OAuth token expires), as the answer tells the client, which logs in again on the
same connection, as the same principal, before then (KIP-368); a connection whose login ended
is closed at its next request. Repeated failures are logged with the client's address and
user name, never a password."""

from __future__ import annotations

import datetime
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from ..context import ServerContext
from ..messages import RequestHeader, make, response_module
from ..sasl import SaslAuthenticationError, SaslServer, sasl_server
from ..session import Session

log = logging.getLogger(__name__)


async def sasl_handshake(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    session: Session = header.session
    enabled = ctx.sasl_mechanisms
    if request.mechanism not in enabled:
        session.close_after_answer = True
        log.warning("refused a login from %s: mechanism %s is not enabled", session.host, request.mechanism)
        return make(m.SaslHandshakeResponse, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=enabled)
    again = session.mechanism is not None and ctx.reauth_ms > 0 and header.api_version > 0  # KIP-368
    if not (session.needs_login or again) or session.sasl is not None:  # not a SASL listener, or logged in
        session.close_after_answer = True
        return make(m.SaslHandshakeResponse, error_code=ErrorCode.illegal_sasl_state, mechanisms=enabled)
    session.sasl = sasl_server(request.mechanism, ctx.broker.users.credential, ctx.tokens)
    session.raw_tokens = header.api_version == 0
    return make(m.SaslHandshakeResponse, error_code=ErrorCode.none, mechanisms=enabled)


async def sasl_authenticate(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    m = response_module(header.api_key, header.api_version)
    session: Session = header.session
    if session.sasl is None:  # no SaslHandshake first, or not a SASL listener
        session.close_after_answer = True
        return _answer(m, ErrorCode.illegal_sasl_state, "SaslAuthenticate before a SaslHandshake", b"")
    try:
        token = await login_step(ctx, session, request.auth_bytes)
    except SaslAuthenticationError as e:
        return _answer(m, ErrorCode.sasl_authentication_failed, str(e), b"")
    lifetime = max(session.expires_ms - ctx.broker.clock.now_ms(), 0) if session.expires_ms else 0
    return _answer(m, ErrorCode.none, None, token, lifetime)


async def login_step(ctx: ServerContext, session: Session, token: bytes) -> bytes:
    """Feed a client token to the login under way; the answer token. A refusal is logged and
    closes the connection once answered."""
    server = session.sasl
    if server is None:
        raise SaslAuthenticationError("a SASL token before a SaslHandshake")
    try:
        answer = await ctx.call(server.step, token)
        if server.user is not None:
            again = " again" if session.mechanism is not None else ""
            session.logged_in(server.user, server.mechanism, _expires_ms(ctx, server))
            log.info("%s logged in%s from %s with %s", session.principal, again, session.host, server.mechanism)
    except SaslAuthenticationError as e:
        session.close_after_answer = True
        log.warning("failed %s login from %s: %s", server.mechanism, session.host, e)
        raise
    return answer


def _expires_ms(ctx: ServerContext, server: SaslServer) -> int:
    """When a login ends unless the client logs in again (KIP-368): after connections.max.reauth.ms,
    or its token's expiry if sooner; 0 (never) when re-authentication is off, as in Kafka."""
    if ctx.reauth_ms <= 0:
        return 0
    ends = ctx.broker.clock.now_ms() + ctx.reauth_ms
    return min(ends, server.expires_ms) if server.expires_ms else ends


def _answer(m: Any, code: ErrorCode, message: str | None, token: bytes, lifetime_ms: int = 0) -> Any:
    return make(
        m.SaslAuthenticateResponse,
        error_code=code,
        error_message=message,
        auth_bytes=token,
        session_lifetime=datetime.timedelta(milliseconds=lifetime_ms),
    )
