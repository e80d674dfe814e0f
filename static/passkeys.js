// Passkeys: "Use a passkey" on the sign-in page, "Add a passkey" in Settings.
// Each asks the server for options (a fresh challenge), lets the browser's WebAuthn API answer,
// and posts the answer as a field of the page's own form: the server checks it there, with the
// password at sign-in (agentos.signin) or in the Settings form (agentos.core.passkeys).
// Loaded from our static files only (script-src 'self'); no inline script, no eval.
(function () {
  "use strict";

  function toBuffer(text) {
    var base64 = text.replace(/-/g, "+").replace(/_/g, "/");
    while (base64.length % 4) base64 += "=";
    var raw = atob(base64);
    var bytes = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    return bytes.buffer;
  }

  function toText(buffer) {
    var bytes = new Uint8Array(buffer);
    var raw = "";
    for (var i = 0; i < bytes.length; i++) raw += String.fromCharCode(bytes[i]);
    return btoa(raw).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function withIds(list) {
    return (list || []).map(function (c) { return Object.assign({}, c, { id: toBuffer(c.id) }); });
  }

  function answer(credential) {
    var r = credential.response;
    var response = { clientDataJSON: toText(r.clientDataJSON) };
    if (r.attestationObject) {
      response.attestationObject = toText(r.attestationObject);
      response.transports = r.getTransports ? r.getTransports() : [];
    } else {
      response.authenticatorData = toText(r.authenticatorData);
      response.signature = toText(r.signature);
      response.userHandle = r.userHandle ? toText(r.userHandle) : null;
    }
    return JSON.stringify({
      id: credential.id,
      rawId: toText(credential.rawId),
      type: credential.type,
      authenticatorAttachment: credential.authenticatorAttachment || null,
      clientExtensionResults: credential.getClientExtensionResults(),
      response: response,
    });
  }

  function show(element, text) {
    element.textContent = text;
    element.hidden = false;
  }

  // POSTs the form's fields (the CSRF token among them); a redirect (the session ended) or a
  // page that is not JSON rejects with the text to show.
  function options(url, form, fields) {
    var body = new FormData();
    fields.forEach(function (name) {
      var input = form.elements.namedItem(name);
      if (input) body.append(name, input.value);
    });
    return fetch(url, { method: "POST", body: body, credentials: "same-origin", redirect: "error" })
      .then(function (response) {
        return response.json().then(function (data) {
          if (!response.ok) throw new Error(data.error || form.dataset.failed);
          return data;
        });
      }, function () { throw new Error(form.dataset.failed); });
  }

  function failure(form, error) {
    // The owner closing the browser's dialog is not a fault worth a red message of its own.
    if (error && error.name === "NotAllowedError") return form.dataset.cancelled;
    return (error && error.message) || form.dataset.failed;
  }

  function signIn(form) {
    var button = form.querySelector("[data-passkey-sign-in]");
    var error = document.getElementById("passkey-error");
    button.hidden = false;
    button.addEventListener("click", function () {
      error.hidden = true;
      var username = form.elements.namedItem("username");
      var password = form.elements.namedItem("password");
      if (!username.value || !password.value) {
        show(error, form.dataset.needPassword);
        (username.value ? password : username).focus();
        return;
      }
      button.disabled = true;
      options(button.dataset.optionsUrl, form, ["csrfmiddlewaretoken"])
        .then(function (o) {
          o.challenge = toBuffer(o.challenge);
          o.allowCredentials = withIds(o.allowCredentials);
          return navigator.credentials.get({ publicKey: o });
        })
        .then(function (credential) {
          form.elements.namedItem("passkey").value = answer(credential);
          form.elements.namedItem("code").value = "";
          form.submit();
        })
        .catch(function (e) {
          button.disabled = false;
          show(error, failure(form, e));
        });
    });
  }

  function enrol(form) {
    var error = form.querySelector("[data-passkey-error]");
    var button = form.querySelector("button[type=submit]");
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      error.hidden = true;
      button.disabled = true;
      options(form.dataset.optionsUrl, form, ["csrfmiddlewaretoken", "name", "code"])
        .then(function (o) {
          o.challenge = toBuffer(o.challenge);
          o.user = Object.assign({}, o.user, { id: toBuffer(o.user.id) });
          o.excludeCredentials = withIds(o.excludeCredentials);
          return navigator.credentials.create({ publicKey: o });
        })
        .then(function (credential) {
          form.elements.namedItem("answer").value = answer(credential);
          // The code was spent on the options; it has no business in this post.
          form.elements.namedItem("code").disabled = true;
          form.submit();
        })
        .catch(function (e) {
          button.disabled = false;
          show(error, failure(form, e));
        });
    });
  }

  function start() {
    // Browsers refuse WebAuthn on an IP address (127.0.0.1 included) and outside a secure
    // context (https, or http on localhost): say so rather than offer what must fail.
    var address = /^[0-9.]+$|^\[/.test(location.hostname);
    var supported =
      window.PublicKeyCredential && navigator.credentials && window.isSecureContext && !address;
    document.querySelectorAll("[data-passkey-form]").forEach(function (form) {
      if (!supported) {
        var note = form.querySelector("[data-passkey-unsupported]");
        if (note) note.hidden = false;
        if (form.dataset.passkeyForm !== "sign-in") {
          form.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
        }
        return;
      }
      if (form.dataset.passkeyForm === "sign-in") signIn(form);
      else enrol(form);
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
