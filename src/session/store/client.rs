//! The session store on Redis or Valkey: the keys, the lease and the versioned write, each one
//! round trip (a Lua script runs atomically on the server).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionAddr, IntoConnectionInfo, Script};
use sha2::{Digest, Sha256};

use super::StoreError;

/// The longest one operation on the store may take, connecting included: the server never waits
/// longer than this on a store that does not answer.
const OP_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a call polls a session another call holds: from the first delay, doubling to the last.
const POLL_DELAYS: (Duration, Duration) = (Duration::from_millis(5), Duration::from_millis(50));

/// Takes the session's lease if it is free (`SET NX PX`) or already this call's (a retry), and then
/// reads the session's version and call count (0 and 0: no such session). Busy: the lease's time
/// left.
const CLAIM: &str = r"
if redis.call('GET', KEYS[2]) == ARGV[1]
   or redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local v = redis.call('HMGET', KEYS[1], 'v', 'c')
  return {1, tonumber(v[1]) or 0, tonumber(v[2]) or 0}
end
return {0, redis.call('PTTL', KEYS[2]), 0}
";

/// Writes the session's new state if the lease is still ours and the version is the one the call
/// started from, then frees the lease: the new version, -1 (lease lost) or -2 (another version).
const COMMIT: &str = r"
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return -1 end
local v = tonumber(redis.call('HGET', KEYS[1], 'v')) or 0
if v ~= tonumber(ARGV[2]) then return -2 end
v = v + 1
redis.call('HSET', KEYS[1], 'v', v, 's', ARGV[3], 'c', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('DEL', KEYS[2])
return v
";

/// Frees the lease if it is still ours, with the state unchanged: counts the call if one ran
/// (`ARGV[3]`, the new count, or empty), and the session's idle time starts again.
const RELEASE: &str = r"
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
if redis.call('EXISTS', KEYS[1]) == 1 then
  if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'c', ARGV[3]) end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
";

/// Sessions in Redis or Valkey. Connects on first use and reconnects by itself; every operation
/// gives up after [`OP_TIMEOUT`].
pub struct SessionStore {
    conn: ConnectionManager,
    /// The store's address for messages: no user name or password.
    shown: String,
    /// A session's key expires after this long without a call.
    idle: Duration,
    claim: Script,
    commit: Script,
    release: Script,
}

impl std::fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

/// A session's lease, held by one call: freed when dropped (in the background) unless the call's
/// state was committed or the lease released first.
pub struct Claim {
    store: Arc<SessionStore>,
    key: String,
    token: String,
    /// The version of the session's state in the store when the lease was taken (0: none).
    pub version: u64,
    /// Calls the session has run, as the store counts them.
    pub calls: u64,
    /// How long the lease lasts: a call that outlives it cannot commit.
    lease: Duration,
    held: bool,
}

/// How a commit ended other than with a new version.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("the call outlasted its lease on the session ({} s)", .0.as_secs())]
    LeaseLost(Duration),
    #[error("the session was changed by another call meanwhile")]
    Conflict,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl SessionStore {
    /// The store at `url` (`redis://` or `rediss://`), whose sessions expire after `idle` without a
    /// call. The user name and password come from the URL, or else from `credentials`. Nothing is
    /// connected yet: a store that is down fails session calls, not the server's start.
    pub fn open(
        url: &str,
        credentials: (Option<String>, Option<String>),
        idle: Duration,
    ) -> Result<SessionStore, StoreError> {
        let bad = |e: &dyn std::fmt::Display| StoreError::BadUrl(e.to_string());
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err(bad(
                &"it must start with redis:// or rediss:// (or be `memory`)",
            ));
        }
        let info = url.into_connection_info().map_err(|e| bad(&e))?;
        let mut settings = info.redis_settings().clone();
        if let (None, Some(user)) = (settings.username(), credentials.0) {
            settings = settings.set_username(user);
        }
        if let (None, Some(password)) = (settings.password(), credentials.1) {
            settings = settings.set_password(password);
        }
        let shown = match info.addr() {
            ConnectionAddr::Tcp(host, port) => format!("redis://{host}:{port}/{}", settings.db()),
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                ..
            } => {
                if *insecure {
                    return Err(bad(
                        &"#insecure is not supported: the store's certificate is always verified (SSL_CERT_FILE can name the roots to trust)",
                    ));
                }
                crate::tls::install_crypto_provider();
                format!("rediss://{host}:{port}/{}", settings.db())
            }
            other => format!("{other}"),
        };
        let info = info.set_redis_settings(settings);
        let client = redis::Client::open(info).map_err(|e| bad(&e))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(OP_TIMEOUT))
            .set_response_timeout(Some(OP_TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_lazy_with_config(client, config).map_err(|e| bad(&e))?;
        Ok(SessionStore {
            conn,
            shown,
            idle,
            claim: Script::new(CLAIM),
            commit: Script::new(COMMIT),
            release: Script::new(RELEASE),
        })
    }

    /// Asks the store whether it answers: how long that took.
    pub async fn ping(&self) -> Result<Duration, StoreError> {
        let started = std::time::Instant::now();
        self.idempotent(|| {
            let mut conn = self.conn.clone();
            async move { redis::cmd("PING").query_async::<String>(&mut conn).await }
        })
        .await?;
        Ok(started.elapsed())
    }

    /// How long a session lasts in the store without a call.
    pub fn idle(&self) -> Duration {
        self.idle
    }

    /// The store's address, without credentials.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The key of session `id`: a hash of its handle, so that the store holds no handle that could
    /// be used, and nothing else about the session in clear.
    fn key(id: &str) -> String {
        let hash = Sha256::digest(format!("safe-python-session:{id}"));
        format!("safe-python:{hash:x}")
    }

    /// The key of the lease of the session at `key`.
    fn lease_key(key: &str) -> String {
        format!("{key}:lease")
    }

    /// Runs `op` on the store within [`OP_TIMEOUT`].
    async fn op<T>(
        &self,
        op: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        self.answer(tokio::time::timeout(OP_TIMEOUT, op).await)
    }

    /// [`SessionStore::op`] for an operation that may run twice: once more if the connection
    /// had dropped (the store restarted), which the connection manager then makes again.
    async fn idempotent<T, F: Future<Output = redis::RedisResult<T>>>(
        &self,
        op: impl Fn() -> F,
    ) -> Result<T, StoreError> {
        let first = tokio::time::timeout(OP_TIMEOUT, op()).await;
        if let Ok(Err(e)) = &first
            && (e.is_connection_dropped() || e.is_io_error())
        {
            tracing::debug!("the session store's connection dropped; trying again: {e}");
            return self.op(op()).await;
        }
        self.answer(first)
    }

    fn answer<T>(
        &self,
        answer: Result<redis::RedisResult<T>, tokio::time::error::Elapsed>,
    ) -> Result<T, StoreError> {
        let cause = match answer {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) => super::bounded(&e.to_string()),
            Err(_) => format!("no answer within {} s", OP_TIMEOUT.as_secs()),
        };
        Err(StoreError::Unavailable {
            store: self.shown.clone(),
            cause,
        })
    }

    /// Takes the lease of the session whose handle is `id` for `lease`, waiting up to `wait` while another call holds it.
    /// `Ok(None)`: another call held it all that time.
    pub async fn claim(
        self: &Arc<Self>,
        id: &str,
        lease: Duration,
        wait: Duration,
    ) -> Result<Option<Claim>, StoreError> {
        let key = Self::key(id);
        let mut token = [0u8; 16];
        getrandom::fill(&mut token).map_err(|e| StoreError::Unavailable {
            store: self.shown.clone(),
            cause: format!("no random lease token: {e}"),
        })?;
        let token = format!("{:032x}", u128::from_le_bytes(token));
        let deadline = tokio::time::Instant::now() + wait;
        let mut delay = POLL_DELAYS.0;
        loop {
            let [claimed, version, calls]: [i64; 3] = self
                .idempotent(|| {
                    let mut conn = self.conn.clone();
                    let mut invocation = self.claim.key(&key);
                    invocation
                        .key(Self::lease_key(&key))
                        .arg(&token)
                        .arg(lease.as_millis() as u64);
                    async move { invocation.invoke_async::<Vec<i64>>(&mut conn).await }
                })
                .await?
                .try_into()
                .map_err(|_| StoreError::Unavailable {
                    store: self.shown.clone(),
                    cause: "an unexpected answer to the lease".into(),
                })?;
            if claimed == 1 {
                return Ok(Some(Claim {
                    store: self.clone(),
                    key,
                    token,
                    version: version.max(0) as u64,
                    calls: calls.max(0) as u64,
                    lease,
                    held: true,
                }));
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            // `version` is the lease's time left: no need to poll past it.
            let left = Duration::from_millis(version.max(1) as u64);
            tokio::time::sleep(delay.min(left).min(deadline - now)).await;
            delay = (delay * 2).min(POLL_DELAYS.1);
        }
    }
}

impl Claim {
    /// The session's stored state, as of [`Claim::version`]; `None` if it has none.
    pub async fn load(&self) -> Result<Option<Vec<u8>>, StoreError> {
        self.store
            .idempotent(|| {
                let mut conn = self.store.conn.clone();
                let mut cmd = redis::cmd("HGET");
                cmd.arg(&self.key).arg("s");
                async move { cmd.query_async(&mut conn).await }
            })
            .await
    }

    /// Writes the session's new state (`blob`) and call count, and frees the lease: the new
    /// version.
    pub async fn commit(mut self, blob: &[u8], calls: u64) -> Result<u64, CommitError> {
        let store = self.store.clone();
        let mut conn = store.conn.clone();
        let mut invocation = store.commit.key(&self.key);
        invocation
            .key(SessionStore::lease_key(&self.key))
            .arg(&self.token)
            .arg(self.version)
            .arg(blob)
            .arg(store.idle.as_millis() as u64)
            .arg(calls);
        let version: i64 = store.op(invocation.invoke_async(&mut conn)).await?;
        self.held = version == -2;
        match version {
            -1 => Err(CommitError::LeaseLost(self.lease)),
            -2 => Err(CommitError::Conflict),
            v => Ok(v.max(0) as u64),
        }
    }

    /// Frees the lease, the state unchanged; `calls`: the new call count, when a call ran.
    pub async fn release(mut self, calls: Option<u64>) -> Result<(), StoreError> {
        self.held = false;
        release(&self.store, &self.key, &self.token, calls).await
    }
}

async fn release(
    store: &SessionStore,
    key: &str,
    token: &str,
    calls: Option<u64>,
) -> Result<(), StoreError> {
    store
        .idempotent(|| {
            let mut conn = store.conn.clone();
            let mut invocation = store.release.key(key);
            invocation
                .key(SessionStore::lease_key(key))
                .arg(token)
                .arg(store.idle.as_millis() as u64)
                .arg(calls.map(|c| c.to_string()).unwrap_or_default());
            async move { invocation.invoke_async::<i64>(&mut conn).await }
        })
        .await
        .map(drop)
}

impl Drop for Claim {
    /// A lease a call let go of without a commit or a release (an error, a cancelled call) is freed
    /// in the background; should that fail, it expires.
    fn drop(&mut self) {
        if !self.held {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, key, token) = (self.store.clone(), self.key.clone(), self.token.clone());
        runtime.spawn(async move {
            if let Err(e) = release(&store, &key, &token, None).await {
                tracing::warn!("cannot free a session's lease (it expires by itself): {e}");
            }
        });
    }
}
