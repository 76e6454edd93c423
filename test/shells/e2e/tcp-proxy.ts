// The link-fault proxy lives in scripts/lib so `npm run chaos` can use it too.
export * from "../../../scripts/lib/tcp-proxy.js";
