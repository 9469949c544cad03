//! The pools of the process, by name, for `vmpool.metrics()`: each pool has a name (`vmpool.new`'s
//! `name` option, or `pool-N`), unique among the open pools of this process because it labels
//! the pool's series. A closed pool leaves the list (its name is free again); so does one
//! inherited through `fork()`, which is not this process's.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::Pool;
use crate::Error;

struct Registry {
    pools: Vec<Weak<Pool>>,
    /// The N of the last default name given.
    last: u64,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    pools: Vec::new(),
    last: 0,
});

fn listed(p: &Weak<Pool>) -> Option<Arc<Pool>> {
    p.upgrade()
        .filter(|p| p.check_process().is_ok() && !p.is_closed())
}

/// Lists `pool` under its name; its name is `None` to get a default one. Fails, listing nothing,
/// when an open pool of this process has that name.
pub fn register(pool: &Arc<Pool>) -> Result<(), Error> {
    let mut reg = REGISTRY.lock();
    reg.pools.retain(|p| listed(p).is_some());
    let taken = |reg: &Registry, name: &str| {
        reg.pools
            .iter()
            .filter_map(listed)
            .any(|p| p.name() == name)
    };
    let name = match pool.config.name.clone() {
        Some(name) => {
            if taken(&reg, &name) {
                return Err(Error::BadArgument(format!(
                    "option 'name' to vmpool.new: a pool named '{}' is open already in this process (a pool's name labels its metrics, so it must be unique); close that pool first or choose another name",
                    name.escape_debug()
                )));
            }
            name
        }
        None => loop {
            reg.last += 1;
            let name = format!("pool-{}", reg.last);
            if !taken(&reg, &name) {
                break name;
            }
        },
    };
    let _ = pool.name.set(name);
    reg.pools.push(Arc::downgrade(pool));
    Ok(())
}

/// The open pools of this process, in the order they were created.
pub fn pools() -> Vec<Arc<Pool>> {
    let reg = REGISTRY.lock();
    reg.pools.iter().filter_map(listed).collect()
}
