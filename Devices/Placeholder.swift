public enum BlemuDevicesPlaceholder {}
