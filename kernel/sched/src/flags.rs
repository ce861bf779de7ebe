//! One definition for Linux's bit-flag sets (`ENQUEUE_*`, `DEQUEUE_*`, `SD_*`,
//! `SCHED_CPUFREQ_*`): [`sched_flags!`] makes a `Copy` newtype with the named constants,
//! `contains`, `insert`, `remove`, `bits`, `|` and a `Debug` that names the flags set.
//! (The `bitflags` crate does the same with more; this is all we need.)

/// Declare a flag set: `sched_flags! { /// doc
/// pub struct Name(u8) { /// doc
/// const A = 1; ... } }`. The constants are the single flags; `NONE` is the empty set.
macro_rules! sched_flags {
    (
        $(#[$meta:meta])*
        pub struct $name:ident($bits:ty) {
            $( $(#[$cmeta:meta])* const $flag:ident = $value:expr; )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
        pub struct $name($bits);

        impl $name {
            /// No flag.
            pub const NONE: $name = $name(0);
            $( $(#[$cmeta])* pub const $flag: $name = $name($value); )*

            /// Every single flag with its name, in declaration order.
            const NAMED: &'static [(&'static str, $name)] = &[$((stringify!($flag), $name::$flag)),*];

            /// Whether every flag of `f` is set.
            pub const fn contains(self, f: $name) -> bool {
                self.0 & f.0 == f.0
            }

            /// Set the flags of `f`.
            pub fn insert(&mut self, f: $name) {
                self.0 |= f.0;
            }

            /// Clear the flags of `f`.
            pub fn remove(&mut self, f: $name) {
                self.0 &= !f.0;
            }

            /// The raw bits (Linux's values).
            pub const fn bits(self) -> $bits {
                self.0
            }
        }

        impl core::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, rhs: $name) -> $name {
                $name(self.0 | rhs.0)
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, "{}(", stringify!($name))?;
                let mut first = true;
                let mut rest = self.0;
                for (n, v) in Self::NAMED {
                    if v.0 != 0 && self.contains(*v) {
                        if !first {
                            f.write_str(" | ")?;
                        }
                        f.write_str(n)?;
                        first = false;
                        rest &= !v.0;
                    }
                }
                if rest != 0 {
                    if !first {
                        f.write_str(" | ")?;
                    }
                    write!(f, "{:#x}", rest)?;
                }
                f.write_str(")")
            }
        }
    };
}

pub(crate) use sched_flags;

#[cfg(test)]
mod tests {
    sched_flags! {
        /// Test flags.
        pub struct T(u8) {
            /// A.
            const A = 1;
            /// B.
            const B = 4;
        }
    }

    #[test]
    fn set_operations_and_debug() {
        let mut f = T::A | T::B;
        assert!(f.contains(T::A) && f.contains(T::A | T::B));
        f.remove(T::A);
        assert!(!f.contains(T::A) && f.contains(T::B));
        f.insert(T(2));
        assert_eq!(f.bits(), 6);
        assert_eq!(std::format!("{f:?}"), "T(B | 0x2)");
        assert_eq!(std::format!("{:?}", T::NONE), "T()");
        assert!(T::NONE.contains(T::NONE));
    }
}
