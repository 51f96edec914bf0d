// redis:// URLs (kv_store.h), with or without hiredis.
#include <cctype>
#include <string>

#include "kvstore/kv_store.h"

namespace tkv::kvstore {

Expected<StoreUrl> parse_store_url(const std::string& url) {
  const std::string scheme = "redis://";
  auto bad = [&](const std::string& why) {
    return Status::Error("--kv-store " + redact_store_url(url) + ": " + why +
                         " (expected redis://[:PASSWORD@]HOST:PORT[/DB])");
  };
  if (url.compare(0, scheme.size(), scheme) != 0) return bad("not a redis:// URL");
  std::string rest = url.substr(scheme.size());
  StoreUrl u;
  if (const size_t at = rest.rfind('@'); at != std::string::npos) {
    const std::string cred = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = cred.find(':');
    if (colon == std::string::npos) return bad("credentials must be :PASSWORD or USER:PASSWORD");
    u.user = cred.substr(0, colon);
    u.password = cred.substr(colon + 1);
    if (u.password.empty()) return bad("empty password");
  }
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty()) {
      if (db.size() > 5) return bad("database number out of range");
      for (char c : db)
        if (!std::isdigit(static_cast<unsigned char>(c))) return bad("database '" + db + "' is not a number");
      u.db = std::stoi(db);
    }
  }
  std::string host = rest;
  if (!rest.empty() && rest[0] == '[') {  // [IPv6]:PORT
    const size_t close = rest.find(']');
    if (close == std::string::npos) return bad("unclosed '['");
    host = rest.substr(1, close - 1);
    rest = rest.substr(close + 1);
    if (!rest.empty() && rest[0] != ':') return bad("expected ':PORT' after ']'");
    rest = rest.empty() ? "" : rest.substr(1);
  } else if (const size_t colon = rest.rfind(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
    rest = rest.substr(colon + 1);
  } else {
    rest.clear();
  }
  if (host.empty()) return bad("no host");
  u.host = host;
  if (!rest.empty()) {
    if (rest.size() > 5) return bad("port out of range");
    for (char c : rest)
      if (!std::isdigit(static_cast<unsigned char>(c))) return bad("port '" + rest + "' is not a number");
    u.port = std::stoi(rest);
    if (u.port < 1 || u.port > 65535) return bad("port out of range");
  }
  return u;
}

std::string redact_store_url(const std::string& url) {
  const size_t at = url.rfind('@');
  const size_t start = url.find("://");
  if (at == std::string::npos || start == std::string::npos || at < start) return url;
  const size_t colon = url.find(':', start + 3);
  if (colon == std::string::npos || colon > at) return url.substr(0, start + 3) + "***" + url.substr(at);
  return url.substr(0, colon + 1) + "***" + url.substr(at);
}

}  // namespace tkv::kvstore
