"""Sign-in (spec §5): :class:`AuthSdk` runs the OAuth 2.0 device flow against the identity
provider a server names, refreshes, and keeps the refresh token in a token file.

The token file is the spec's (JSON ``refresh_token`` and ``expires_in``, mode 0600, written
atomically); by default it is the one ``mission login`` uses (``$MISSION_TOKEN_FILE``, else
``~/.mission``), and ``""`` stores nothing. Unlike the reference, polling stops when the user
denies or the code expires, and a provider that rotates refresh tokens is followed.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional, Union

from ._native import NativeAuth
from ._progress import in_notebook, notebook_display
from ._types import DeviceCode, Tokens, _one

Prompt = Union[str, Callable[[DeviceCode], Any], None]


def _show_in_notebook(code: DeviceCode) -> None:
    # The link and the code as HTML, and the same instruction in words for front ends that show
    # only text (a dataclass repr would hide what to do).
    notebook_display().display({"text/html": code._repr_html_(), "text/plain": str(code)}, raw=True)


def _native_prompt(prompt: Prompt) -> Any:
    """What the native module takes: ``"browser"``, ``"print"`` or a function of the code's JSON."""
    if prompt is None:
        prompt = _show_in_notebook if in_notebook() else "browser"
    if isinstance(prompt, str):
        return prompt
    if not callable(prompt):
        raise TypeError('prompt: expected "browser", "print" or a function of a DeviceCode')
    show = prompt
    return lambda shown: show(_one(DeviceCode, shown))


class AuthSdk:
    """Signs in to the server at ``server_url`` (else the one ``mission login`` remembered).

    ``client_id`` and ``audience`` default to what the server advertises. ``token_file`` is where
    the refresh token is kept (``None``: the saved session's file; ``""``: nowhere, the caller
    keeps the tokens). ``prompt`` shows the device code: ``"browser"`` opens the sign-in page
    (printing the address and code when no browser opens), ``"print"`` only prints, a function
    gets a :class:`DeviceCode`; by default a notebook shows a link and the code, a terminal the
    browser.

        auth = mission.AuthSdk("https://mission.example.org")
        tokens = auth.initialize()
        client = mission.Client("https://mission.example.org", access_token=tokens.access_token)
    """

    def __init__(
        self,
        server_url: Optional[str] = None,
        client_id: Optional[str] = None,
        audience: Optional[str] = None,
        token_file: Optional[Union[str, "os.PathLike[str]"]] = None,
        prompt: Prompt = None,
    ) -> None:
        path = None if token_file is None else os.fspath(token_file)
        self._native = NativeAuth(server_url, client_id, audience, path, _native_prompt(prompt))

    @property
    def server_url(self) -> str:
        """The server signed in to."""
        return self._native.server_url

    @property
    def auth_url(self) -> str:
        """The identity provider's URL."""
        return self._native.auth_url

    @property
    def token_file(self) -> Optional[str]:
        """The token file, or ``None`` when nothing is stored."""
        path = self._native.token_file
        return None if path is None else os.fspath(path)

    def initialize(self) -> Tokens:
        """Refreshes with the token file's refresh token when the file exists, signs in with the
        device flow otherwise; stores the refresh token and its expiry."""
        return _one(Tokens, self._native.initialize())

    def device_flow(self) -> Tokens:
        """Signs in with the device flow, whatever the token file holds."""
        return _one(Tokens, self._native.device_flow())

    def refresh(self, refresh_token: str) -> Tokens:
        """A new access token for ``refresh_token`` (which stays the same unless the provider
        rotates it); stored in the token file, if there is one."""
        return _one(Tokens, self._native.refresh(refresh_token))

    def revoke(self, refresh_token: str) -> None:
        """Revokes ``refresh_token`` at the provider and removes the token file."""
        self._native.revoke(refresh_token)
