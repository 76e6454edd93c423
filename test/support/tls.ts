// A throwaway self-signed certificate for TLS tests (openssl, one day).
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import * as path from "node:path";

export interface SelfSigned {
  /** Paths of the PEM files. */
  keyFile: string;
  certFile: string;
  key: Buffer;
  cert: Buffer;
}

/** Write a key and a certificate for `cn` (default 127.0.0.1, with that IP as its subjectAltName) into `dir`. */
export function selfSignedCert(dir: string, o: { cn?: string; san?: string; keyName?: string; certName?: string } = {}): SelfSigned {
  const keyFile = path.join(dir, o.keyName ?? "key.pem");
  const certFile = path.join(dir, o.certName ?? "cert.pem");
  const subject = ["-subj", `/CN=${o.cn ?? "127.0.0.1"}`, "-addext", `subjectAltName=${o.san ?? "IP:127.0.0.1"}`];
  execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", keyFile, "-out", certFile, ...subject], {
    stdio: "ignore",
  });
  return { keyFile, certFile, key: readFileSync(keyFile), cert: readFileSync(certFile) };
}
